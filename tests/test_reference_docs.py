"""The reference pages (docs/reference/) are what scripts/write_reference_docs.py writes from the code now, and every
config field has a meaning there: a new field, flag or entry point reaches the reference or fails here."""

from __future__ import annotations

from script_modules import load_script


def test_reference_pages_are_current():
    writer = load_script("scripts/write_reference_docs.py", "write_reference_docs")
    stale = [name for name, text in writer.pages().items() if writer.PAGES[name].read_text(encoding="utf-8") != text]
    assert not stale, f"docs/reference/{stale} differ from the code: run `python scripts/write_reference_docs.py`"


def test_every_config_field_has_a_meaning_and_every_meaning_a_field():
    writer = load_script("scripts/write_reference_docs.py", "write_reference_docs")
    fields = set().union(*(writer.config_fields(model_type) for model_type in writer.MODEL_TYPES))
    assert fields - set(writer.FIELD_MEANINGS) == set(), "config fields without a meaning in FIELD_MEANINGS"
    assert set(writer.FIELD_MEANINGS) - fields == set(), "meanings of fields that no config has"


def test_every_command_and_flag_is_in_the_cli_reference():
    from hf_llmsys import cli
    from hf_llmsys.cli.parsing import shown_option_strings

    page = load_script("scripts/write_reference_docs.py", "write_reference_docs").PAGES["cli"].read_text()
    for name in cli.SUBCOMMANDS:
        assert f"## llmsys {name}\n" in page
    sft_flags = [a for a in cli.build_parser("sft")._actions if "--lora_r" in a.option_strings]
    assert f"| `{shown_option_strings(sft_flags[0].option_strings)[0]}` |" in page
