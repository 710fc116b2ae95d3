"""Hub round trips through the unmodified huggingface_hub client, against the loopback Hub (tests/hub_server.py).

The client side runs in a worker process whose HF_ENDPOINT points at the server before any import (why: see
tests/hub_fixtures.py); the server's request log and state are checked here. Each test names the routes or
client errors it exercises.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from hub_fixtures import ALICE, client, client_env, hub  # noqa: F401 (fixtures)
from remote_code import BLOCK_THE_PACKAGE

# Helpers defined once in the client process: tiny models of each type with a tokenizer and generation config.
SETUP = """
import json, torch, hf_llmsys
from pathlib import Path
from huggingface_hub import HfApi, ModelCard, hf_hub_download, snapshot_download
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig
from hf_llmsys.cli import main as llmsys
from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.data.tokenizer import train_bpe_tokenizer
from hf_llmsys.data.sentinel_tokenizer import train_sentinel_tokenizer
from hf_llmsys.hub.cards import write_model_card

TEXT = [load_default_corpus()[:20000]]
TOKENIZERS = {"bpe": train_bpe_tokenizer(TEXT, vocab_size=300), "sentinel": train_sentinel_tokenizer(TEXT, vocab_size=300)}
AUTO = {"llmsys_llama": AutoModelForCausalLM, "llmsys_gpt3": AutoModelForCausalLM, "llmsys_t5": AutoModelForSeq2SeqLM}

def tiny(model_type, seed=0):
    torch.manual_seed(seed)
    if model_type == "llmsys_t5":
        tok = TOKENIZERS["sentinel"]
        cfg = hf_llmsys.LlmsysT5Config.from_preset("debug", vocab_size=len(tok), dropout_rate=0.0)
        model = hf_llmsys.LlmsysT5ForConditionalGeneration(cfg)
    elif model_type == "llmsys_gpt3":
        tok = TOKENIZERS["bpe"]
        cfg = hf_llmsys.LlmsysGPT3Config.from_preset("debug", vocab_size=len(tok), bos_token_id=tok.eos_token_id,
                                                     eos_token_id=tok.eos_token_id)
        model = hf_llmsys.LlmsysGPT3ForCausalLM(cfg)
    else:
        tok = TOKENIZERS["bpe"]
        cfg = hf_llmsys.LlmsysLlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                                          bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
        model = hf_llmsys.LlmsysLlamaForCausalLM(cfg)
    gen = GenerationConfig(max_new_tokens=7, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                           decoder_start_token_id=cfg.decoder_start_token_id if model_type == "llmsys_t5" else None)
    return model.eval(), tok, gen

def logits(model, ids):
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            return model(input_ids=ids, decoder_input_ids=ids[:, :5]).logits
        return model(ids).logits

def save(model, tok, gen, folder, **results):
    model.save_pretrained(folder); tok.save_pretrained(folder); gen.save_pretrained(folder)
    if results:
        Path(folder, "train_results.json").write_text(json.dumps(results))
    write_model_card(folder)
    return Path(folder)

IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11, 64]])
RESULTS = {"val_loss": 4.5, "val_perplexity": 90.0, "global_step": 10, "tokens_seen": 1280, "dataset": "tiny text"}
"""


@pytest.fixture(scope="module", autouse=True)
def _helpers(client):  # noqa: F811
    """Define the SETUP helpers in the client process before any test of this module."""
    client.run(SETUP)


@pytest.fixture(scope="module")
def pushed(client, hub, tmp_path_factory):  # noqa: F811
    """The three model types pushed to alice's repos (llama and gpt3 by transformers' push_to_hub, sharded; t5
    by `llmsys push`), with the logits each must reproduce."""
    work = tmp_path_factory.mktemp("pushed")
    return client.run(
        f"""
        expected = {{}}
        for model_type in ("llmsys_llama", "llmsys_gpt3", "llmsys_t5"):
            model, tok, gen = tiny(model_type)
            folder = save(model, tok, gen, Path({str(work)!r}) / model_type, **RESULTS)
            repo = "alice/" + model_type.replace("_", "-")
            if model_type == "llmsys_t5":
                assert llmsys(["push", str(folder), repo, "--commit-message", "t5 via llmsys push"]) == 0
            else:
                write_model_card(folder, repo_id=repo)
                model.push_to_hub(repo, max_shard_size="30KB", commit_message="weights")
                tok.push_to_hub(repo); gen.push_to_hub(repo)
                ModelCard.load(folder / "README.md").push_to_hub(repo)
            expected[repo] = logits(model, IDS).tolist()
        torch.save({{k: torch.tensor(v) for k, v in expected.items()}}, {str(work / "expected.pt")!r})
        result = {{"expected": {str(work / "expected.pt")!r}, "repos": sorted(expected)}}
        """
    )


def test_push_to_hub_lfs_and_sharding_then_from_pretrained_gives_identical_logits(client, hub, pushed):  # noqa: F811
    """Routes: create_repo, preupload, lfs_batch / lfs_upload / lfs_verify (safetensors are LFS per .gitattributes),
    commit, validate_yaml; repo_info, tree, resolve (HEAD + GET) on the way back."""
    assert {"create_repo", "preupload", "lfs_batch", "lfs_upload", "lfs_verify", "commit", "validate_yaml"} <= (
        hub.routes_hit()
    )
    llama = hub.repos[("model", "alice/llmsys-llama")]
    tree = llama.commits[llama.branches["main"]].tree
    shards = [path for path in tree if path.endswith(".safetensors")]
    assert len(shards) > 1 and "model.safetensors.index.json" in tree  # max_shard_size split the checkpoint
    assert all(tree[path].lfs_sha256 for path in shards) and tree["config.json"].lfs_sha256 is None
    assert {"modeling_llmsys_llama.py", "configuration_llmsys_llama.py", "tokenizer.json", "README.md"} <= set(tree)
    t5_tree = hub.repos[("model", "alice/llmsys-t5")].commits[hub.repos[("model", "alice/llmsys-t5")].branches["main"]]
    assert t5_tree.title == "t5 via llmsys push" and "generation_config.json" in t5_tree.tree
    checks = client.run(
        f"""
        expected = torch.load({pushed["expected"]!r})
        result = {{}}
        for repo, want in expected.items():
            model_type = "llmsys_" + repo.split("llmsys-")[1]
            model = AUTO[model_type].from_pretrained(repo).eval()
            tok = AutoTokenizer.from_pretrained(repo)
            local_tok = tiny(model_type)[1]
            gen = GenerationConfig.from_pretrained(repo)
            card = ModelCard.load(hf_hub_download(repo, "README.md"))
            files = sorted(p.name for p in Path(snapshot_download(repo)).iterdir())
            result[repo] = {{
                "diff": (logits(model, IDS) - want).abs().max().item(),
                "class": type(model).__name__,
                "tokens_equal": tok("a hacker is")["input_ids"] == local_tok("a hacker is")["input_ids"],
                "max_new_tokens": gen.max_new_tokens,
                "tags": card.data.tags,
                "files": files,
            }}
        """
    )
    for repo, check in checks.items():
        model_type = "llmsys_" + repo.split("llmsys-")[1]
        assert check["diff"] == 0.0, (repo, check["diff"])
        assert check["class"].startswith("Llmsys") and check["tokens_equal"] and check["max_new_tokens"] == 7
        assert {"hf-llmsys", model_type, "custom_code"} <= set(check["tags"])
        assert f"modeling_{model_type}.py" in check["files"] and "README.md" in check["files"]


def test_clean_process_without_hf_llmsys_loads_from_the_hub_with_remote_code(hub, pushed, tmp_path):  # noqa: F811
    """A process where hf_llmsys cannot be imported: from_pretrained("alice/...", trust_remote_code=True) downloads
    the modeling code with the weights (resolve route) and gives identical logits."""
    body = f"""
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
expected = torch.load({pushed["expected"]!r})
ids = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11, 64]])
for repo, want in expected.items():
    auto = AutoModelForSeq2SeqLM if repo.endswith("t5") else AutoModelForCausalLM
    model = auto.from_pretrained(repo, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    with torch.no_grad():
        out = model(input_ids=ids, decoder_input_ids=ids[:, :5]) if repo.endswith("t5") else model(ids)
    assert (out.logits - want).abs().max().item() == 0.0, repo
assert "hf_llmsys" not in sys.modules
print("REMOTE_OK")
"""
    env = client_env(hub.endpoint, tmp_path) | {"HF_TOKEN": ALICE, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", BLOCK_THE_PACKAGE + body], capture_output=True, text=True, env=env)
    assert "REMOTE_OK" in result.stdout, result.stderr[-3000:]


def test_revisions_branch_tag_and_commit_sha_load_their_own_weights(client, hub, tmp_path):  # noqa: F811
    """Routes: create_tag, create_branch, refs, repo_info/revision/{rev}; from_pretrained(revision=...) resolves a
    branch, a tag and a commit sha to that commit's weights, not the latest."""
    versions = client.run(
        f"""
        api = HfApi()
        repo, versions = "alice/revisions", {{}}
        for seed, branch in ((1, "main"), (2, "dev"), (3, "main")):
            model, tok, gen = tiny("llmsys_llama", seed=seed)
            folder = save(model, tok, gen, Path({str(tmp_path)!r}) / f"v{{seed}}")
            args = ["push", str(folder), repo] + (["--revision", branch] if branch != "main" else [])
            assert llmsys(args) == 0
            sha = api.list_repo_refs(repo).branches
            sha = next(b.target_commit for b in sha if b.name == branch)
            versions[f"v{{seed}}"] = {{"sha": sha, "logits": logits(model, IDS).tolist()}}
            if seed == 1:
                api.create_tag(repo, tag="v1", revision=sha)
        result = versions
        """
    )
    assert versions["v1"]["sha"] != versions["v3"]["sha"]
    loaded = client.run(
        f"""
        result = {{}}
        for revision in ("v1", {versions["v1"]["sha"]!r}, "dev", "main", None):
            model = AutoModelForCausalLM.from_pretrained("alice/revisions", revision=revision)
            result[str(revision)] = logits(model, IDS).tolist()
        """
    )
    # exact equality: the same weights give bit-identical logits in the same process
    assert loaded["v1"] == loaded[versions["v1"]["sha"]] == versions["v1"]["logits"]
    assert loaded["dev"] == versions["v2"]["logits"]
    assert loaded["main"] == loaded["None"] == versions["v3"]["logits"]
    assert loaded["v1"] != loaded["main"]
    repo = hub.repos[("model", "alice/revisions")]
    assert repo.tags == {"v1": versions["v1"]["sha"]} and repo.branches["dev"] == versions["v2"]["sha"]
    # dev was created from main at v1 and got one commit on top of it
    assert repo.commits[versions["v2"]["sha"]].parent == versions["v1"]["sha"]

    pulled = client.run(
        f"""
        out = {str(tmp_path / "pulled")!r}
        assert llmsys(["pull", "alice/revisions", out, "--revision", "v1"]) == 0
        model = AutoModelForCausalLM.from_pretrained(out)
        result = logits(model, IDS).tolist()
        """
    )
    assert pulled == versions["v1"]["logits"]


def cli_error(client, argv: list[str], token: str | None = ALICE) -> str:  # noqa: F811
    """Run `llmsys ARGV` in the client; it must exit 2 with one error line on stderr (after the command's progress
    note, "pushing ..."), returned."""
    answer = client.call(f"import sys\nresult = llmsys({argv!r})", token=token)
    assert "error" not in answer, answer["error"]["traceback"]
    assert answer["result"] == 2, answer
    lines = answer["stderr"].strip().splitlines()
    errors = [line for line in lines if line.startswith(f"llmsys {argv[0]}: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in answer["stderr"], answer["stderr"]
    assert all(line.startswith(("pushing ", "pulling ")) for line in lines[:-1]), answer["stderr"]
    return errors[0]


def test_private_repo_is_invisible_without_a_token_to_others_and_with_a_wrong_token(client, hub, tmp_path):  # noqa: F811
    """RepositoryNotFoundError (404 X-Error-Code RepoNotFound) for anonymous callers and another user; HTTP 401
    for an unknown token; the owner's read token sees it."""
    client.run(
        f"""
        model, tok, gen = tiny("llmsys_llama")
        folder = save(model, tok, gen, Path({str(tmp_path)!r}) / "private")
        assert llmsys(["push", str(folder), "alice/secret", "--private"]) == 0
        """
    )
    assert hub.repos[("model", "alice/secret")].private
    probe = """
    from huggingface_hub.errors import RepositoryNotFoundError
    try:
        AutoModelForCausalLM.from_pretrained("alice/secret")
        result = "loaded"
    except OSError as err:
        result = type(err.__cause__).__name__
    """
    assert client.run(probe, token=None) == "RepositoryNotFoundError"
    assert client.run(probe, token="hf_bob_write") == "RepositoryNotFoundError"
    assert client.run(probe, token="hf_alice_read") == "loaded"
    wrong = client.raises('HfApi().model_info("alice/secret")', token="hf_not_a_token")
    assert wrong.type == "HfHubHTTPError" and "401" in wrong.message
    assert "not found" in cli_error(client, ["pull", "alice/secret", str(tmp_path / "x")], token=None)
    assert "HTTP 401" in cli_error(client, ["pull", "alice/secret", str(tmp_path / "x")], token="hf_not_a_token")


def test_push_without_write_access_fails_with_one_line(client, hub, tmp_path):  # noqa: F811
    """create_repo 403 falls back to reading the repo (exist_ok), then preupload answers 403 (another user, a read
    token) or 401 (no token); the repo keeps its commit."""
    client.run(
        f"""
        model, tok, gen = tiny("llmsys_llama")
        shared_folder = save(model, tok, gen, Path({str(tmp_path)!r}) / "public")
        assert llmsys(["push", str(shared_folder), "alice/public"]) == 0
        """
    )
    head = hub.repos[("model", "alice/public")].branches["main"]
    folder = str(tmp_path / "public")
    assert "HTTP 403" in cli_error(client, ["push", folder, "alice/public"], token="hf_bob_write")
    assert "HTTP 403" in cli_error(client, ["push", folder, "alice/public"], token="hf_alice_read")
    assert "HTTP 401" in cli_error(client, ["push", folder, "alice/public"], token=None)
    assert hub.repos[("model", "alice/public")].branches["main"] == head


def test_typed_client_errors_and_bad_input_reach_the_user_as_one_line(client, hub, tmp_path):  # noqa: F811
    """RevisionNotFoundError, EntryNotFoundError, GatedRepoError from the X-Error-Code header; an invalid repo id
    and a folder that is not a saved model are refused before any request."""
    client.run(
        f"""
        model, tok, gen = tiny("llmsys_llama")
        assert llmsys(["push", str(save(model, tok, gen, Path({str(tmp_path)!r}) / "m")), "alice/typed"]) == 0
        """
    )
    out = str(tmp_path / "out")
    line = cli_error(client, ["pull", "alice/typed", out, "--revision", "no-such-branch"])
    assert "revision 'no-such-branch' not found" in line and "branches: main" in line
    assert "not found" in cli_error(client, ["pull", "alice/nothing-here", out])
    assert "not a valid Hub repo id" in cli_error(client, ["push", str(tmp_path / "m"), "alice/bad id!"])
    assert "not a valid Hub repo id" in cli_error(client, ["pull", "a/b/c", out])
    (tmp_path / "empty").mkdir()
    assert "is not a saved model, adapter or dataset" in cli_error(client, ["push", str(tmp_path / "empty"), "alice/x"])
    entry = client.raises('hf_hub_download("alice/typed", "no-such-file.json")')
    assert entry.type in ("EntryNotFoundError", "RemoteEntryNotFoundError")
    revision = client.raises('hf_hub_download("alice/typed", "config.json", revision="nope")')
    assert revision.type == "RevisionNotFoundError"
    hub.repos[("model", "alice/typed")].gated = True
    try:
        gated = client.raises('hf_hub_download("alice/typed", "config.json")', token="hf_bob_write")
        assert gated.type == "GatedRepoError"
        assert "gated" in cli_error(client, ["pull", "alice/typed", out], token="hf_bob_write")
    finally:
        hub.repos[("model", "alice/typed")].gated = False


@pytest.mark.parametrize("fault", ["500", "drop"])
def test_failed_commit_leaves_the_previous_commit_and_a_retry_completes(client, hub, tmp_path, fault):  # noqa: F811
    """The commit route answers 500 / drops the connection: the push fails as one line, main stays at the
    previous commit (a push is one commit), the same command again commits; an unchanged re-push makes none."""
    repo_id = f"alice/fail-{fault}"
    client.run(
        f"""
        model, tok, gen = tiny("llmsys_llama", seed=1)
        folder = save(model, tok, gen, Path({str(tmp_path)!r}) / "m")
        assert llmsys(["push", str(folder), {repo_id!r}]) == 0
        model, _, _ = tiny("llmsys_llama", seed=2)
        model.save_pretrained(folder)
        result = logits(model, IDS).tolist()
        """
    )
    repo = hub.repos[("model", repo_id)]
    first = repo.branches["main"]
    hub.inject_fault("commit", fault)
    line = cli_error(client, ["push", str(tmp_path / "m"), repo_id])
    assert "nothing was committed: run the same command again" in line
    assert repo.branches["main"] == first and len(repo.commits) == 2  # .gitattributes commit + the first push
    old = client.run(f"result = logits(AutoModelForCausalLM.from_pretrained({repo_id!r}), IDS).tolist()")
    retry = client.call(f'result = llmsys(["push", {str(tmp_path / "m")!r}, {repo_id!r}])')
    assert (
        retry["result"] == 0 and repo.branches["main"] != first and repo.commits[repo.branches["main"]].parent == first
    )
    assert f"committed {hub.endpoint}/{repo_id}/commit/{repo.branches['main']}" in retry["stdout"]  # the commit URL
    new = client.run(f"result = logits(AutoModelForCausalLM.from_pretrained({repo_id!r}), IDS).tolist()")
    assert old != new
    commits = len(repo.commits)
    again = client.call(f'result = llmsys(["push", {str(tmp_path / "m")!r}, {repo_id!r}])')
    assert again["result"] == 0 and "unchanged, no new commit" in again["stdout"]
    assert len(repo.commits) == commits


def test_dropped_lfs_upload_is_retried_by_the_client(client, hub, tmp_path):  # noqa: F811
    """The LFS PUT route drops the connection once: huggingface_hub's backoff retries it and the push completes."""
    client.run(
        f"""
        model, tok, gen = tiny("llmsys_gpt3", seed=4)
        folder = save(model, tok, gen, Path({str(tmp_path)!r}) / "m")
        """
    )
    hub.inject_fault("lfs_upload", "drop")
    assert client.run(f'result = llmsys(["push", {str(tmp_path / "m")!r}, "alice/lfs-retry"])') == 0
    assert ("PUT", "lfs_upload", 0) in hub.log and hub.faults["lfs_upload"][1] == 0
    repo = hub.repos[("model", "alice/lfs-retry")]
    assert repo.commits[repo.branches["main"]].tree["model.safetensors"].lfs_sha256 in hub.lfs_objects


def test_model_card_push_to_hub_is_validated_and_parses_back(client, hub, pushed):  # noqa: F811
    """ModelCard.push_to_hub calls the validate-yaml route; the README read back parses into the same metadata."""
    answer = client.run(
        """
        card = ModelCard.load("alice/llmsys-gpt3")
        card.push_to_hub("alice/llmsys-gpt3", commit_message="card again")
        result = {"data": card.data.to_dict(), "eval": [r.metric_type for r in card.data.eval_results]}
        """
    )
    assert ("POST", "validate_yaml", 200) in hub.log
    assert answer["data"]["library_name"] == "transformers" and answer["data"]["pipeline_tag"] == "text-generation"
    assert answer["eval"] == ["perplexity", "loss"]
    invalid = client.raises(
        """
        bad = ModelCard("---\\nmodel-index:\\n- name: x\\n  results:\\n  - task: {}\\n---\\n# x\\n")
        bad.push_to_hub("alice/llmsys-gpt3")
        """
    )
    assert invalid.type in ("BadRequestError", "HfHubHTTPError", "ValueError"), invalid.message


def test_llmsys_cli_process_with_a_wrong_hf_token_prints_one_line_and_exits_2(hub, pushed, tmp_path):  # noqa: F811
    """The real console path in its own process: HF_TOKEN is read from the environment (a wrong one is rejected
    with HTTP 401); exit code 2 and one line, no traceback."""
    command = [sys.executable, "-c", "import sys; from hf_llmsys.cli import main; sys.exit(main())"]
    env = client_env(hub.endpoint, tmp_path) | {"HF_TOKEN": "hf_wrong"}
    bad = subprocess.run([*command, "pull", "alice/llmsys-llama", str(tmp_path / "q")], capture_output=True, text=True, env=env)  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "HTTP 401" in bad.stderr, bad.stderr
    assert not (tmp_path / "q").exists()


def test_push_of_a_foreign_model_type_uploads_without_writing_a_card(client, hub, tmp_path):  # noqa: F811
    """A transformers LlamaForCausalLM folder: push says no card was written and uploads it; it loads back."""
    answer = client.call(
        f"""
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32)).eval()
        model.save_pretrained({str(tmp_path / "llama")!r})
        assert llmsys(["push", {str(tmp_path / "llama")!r}, "alice/plain-llama"]) == 0
        back = AutoModelForCausalLM.from_pretrained("alice/plain-llama").eval()
        result = (logits(back, IDS[:, :4] % 64) - logits(model, IDS[:, :4] % 64)).abs().max().item()
        """
    )
    assert answer.get("result") == 0.0, answer
    assert "warning: no model card written" in answer["stderr"] and not (tmp_path / "llama" / "README.md").exists()


def test_stored_login_is_used_when_hf_token_is_unset(client, hub, tmp_path):  # noqa: F811
    """huggingface_hub.login() (whoami-v2 route) stores the token; `llmsys push` then authenticates with it."""
    answer = client.call(
        f"""
        from huggingface_hub import login, logout
        login(token="hf_alice_write", add_to_git_credential=False)
        try:
            model, tok, gen = tiny("llmsys_llama")
            result = llmsys(["push", str(save(model, tok, gen, Path({str(tmp_path)!r}) / "m")), "logged-in"])
        finally:
            logout()
        """,
        token=None,
    )
    assert answer.get("result") == 0, answer
    assert ("GET", "whoami", 200) in hub.log and ("model", "alice/logged-in") in hub.repos  # 'name' -> alice/name


def raw(hub, method: str, path: str, body: bytes | None = None, headers: dict | None = None):  # noqa: F811
    """One request straight to the server (no client library): (status, headers)."""
    request = urllib.request.Request(hub.endpoint + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


def test_server_is_strict_where_the_hub_is(client, hub):  # noqa: F811
    """Parent-commit check (412 through HfApi.upload_file(parent_commit=...)), error codes on HEAD, required
    content types, commits only to branches, lfsFile lines only for uploaded objects."""
    answer = client.run(
        """
        api = HfApi()
        api.create_repo("alice/strict")
        first = api.upload_file(path_or_fileobj=b"one", path_in_repo="a.txt", repo_id="alice/strict").oid
        api.upload_file(path_or_fileobj=b"two", path_in_repo="a.txt", repo_id="alice/strict")
        try:
            api.upload_file(path_or_fileobj=b"three", path_in_repo="a.txt", repo_id="alice/strict", parent_commit=first)
            result = "committed"
        except Exception as err:
            result = [type(err).__name__, err.response.status_code]
        """
    )
    assert answer == ["HfHubHTTPError", 412]
    auth = {"Authorization": f"Bearer {ALICE}"}
    status, headers = raw(hub, "HEAD", "/alice/strict/resolve/main/missing.txt")
    assert (status, headers.get("X-Error-Code")) == (404, "EntryNotFound")
    assert raw(hub, "HEAD", "/alice/strict/resolve/nope/a.txt")[1].get("X-Error-Code") == "RevisionNotFound"
    assert raw(hub, "HEAD", "/alice/none/resolve/main/a.txt")[1].get("X-Error-Code") == "RepoNotFound"
    status, headers = raw(hub, "HEAD", "/alice/strict/resolve/main/a.txt")
    assert status == 200 and headers["X-Repo-Commit"] and headers["ETag"]
    header = b'{"key": "header", "value": {"summary": "x"}}\n'
    ndjson = {**auth, "Content-Type": "application/x-ndjson"}
    assert (
        raw(hub, "POST", "/api/models/alice/strict/commit/main", header, {**auth, "Content-Type": "text/plain"})[0]
        == 400
    )
    file_line = b'{"key": "file", "value": {"path": "b.txt", "content": "Yg==", "encoding": "base64"}}\n'
    assert raw(hub, "POST", "/api/models/alice/strict/commit/main", file_line, ndjson)[0] == 400  # no header line
    lfs_line = (
        b'{"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "' + b"0" * 64 + b'", "size": 3}}\n'
    )
    assert raw(hub, "POST", "/api/models/alice/strict/commit/main", header + lfs_line, ndjson)[0] == 400
    assert (
        raw(hub, "POST", "/api/models/alice/strict/commit/v9", header, ndjson)[1].get("X-Error-Code")
        == "RevisionNotFound"
    )
    assert (
        raw(hub, "POST", "/api/models/alice/strict/commit/main", header, {**ndjson, "Authorization": "Bearer x"})[0]
        == 401
    )
    assert (
        raw(
            hub,
            "POST",
            "/api/models/alice/strict/commit/main",
            header,
            {**ndjson, "Authorization": "Bearer hf_bob_write"},
        )[0]
        == 403
    )


def test_every_request_of_this_module_hit_a_served_route(hub):  # noqa: F811
    """Runs last: no request of the round trips above fell outside the routes the server implements (an unknown
    route would be a client path these tests did not really exercise)."""
    assert hub.log and not [entry for entry in hub.log if entry[1] == "unknown"]
