"""`llmsys push FOLDER REPO_ID`, `llmsys pull REPO_ID FOLDER`, `llmsys card FOLDER`: their parsers.

What push and pull do is ``hf_llmsys/hub/transfer.py``; the card is ``hf_llmsys/hub/cards.py``.
"""

from __future__ import annotations

from pathlib import Path

from .parsing import CommandParser


def build_push_parser() -> CommandParser:
    """The flags of `llmsys push`."""
    parser = CommandParser(
        prog="llmsys push",
        description="Push a saved model, adapter or `llmsys clean` FOLDER to the Hub repo REPO_ID as one commit "
        "(token: HF_TOKEN or `hf auth login`).",
    )
    parser.add_argument("folder", metavar="FOLDER", help="the saved folder")
    parser.add_argument("repo_id", metavar="REPO_ID", help="'namespace/name' (or 'name' for your own namespace)")
    parser.add_argument("--private", action="store_true", help="create the repo private (if it does not exist)")
    parser.add_argument("--revision", help="branch to commit to (created from main if missing; default main)")
    parser.add_argument("--commit_message", help="commit title (default: 'Upload <kind> with hf-llmsys')")
    parser.add_argument(
        "--format",
        choices=["transformers"],
        help="push the model's transformers-native export (`llmsys export --format transformers`: transformers' "
        "own classes, no remote code) instead of the folder as saved",
    )
    return parser


def push_main(argv: list[str] | None = None) -> dict:
    """`llmsys push FOLDER REPO_ID [--private] [--revision BRANCH] [--commit_message MSG]`."""
    args = build_push_parser().parse_args(argv)
    options = {"private": args.private, "revision": args.revision, "commit_message": args.commit_message}
    if args.format is not None:
        from ..export.push import push_export

        pushed = push_export(args.folder, args.repo_id, args.format, **options)
    else:
        from ..hub.transfer import push_folder

        pushed = push_folder(args.folder, args.repo_id, **options)
    print(f"{'committed' if pushed['changed'] else 'unchanged, no new commit:'} {pushed['commit_url']}")
    return pushed


def build_pull_parser() -> CommandParser:
    """The flags of `llmsys pull`."""
    parser = CommandParser(prog="llmsys pull", description="Download one revision of the Hub repo REPO_ID into FOLDER.")
    parser.add_argument("repo_id", metavar="REPO_ID", help="'namespace/name'")
    parser.add_argument("folder", metavar="FOLDER", help="where to put the files (created if missing)")
    parser.add_argument("--revision", help="branch, tag or commit sha (default: main)")
    parser.add_argument("--repo_type", default="model", choices=["model", "dataset"], help="what the repo holds")
    return parser


def pull_main(argv: list[str] | None = None) -> dict:
    """`llmsys pull REPO_ID FOLDER [--revision REV] [--repo_type model|dataset]`."""
    args = build_pull_parser().parse_args(argv)
    from ..hub.transfer import pull_repo
    from .verify import print_verify_report

    pulled = pull_repo(args.repo_id, args.folder, revision=args.revision, repo_type=args.repo_type)
    print(f"downloaded {len(pulled['files'])} files of commit {pulled['commit']} into {pulled['path']}")
    if pulled["verified"] is not None:
        print_verify_report(pulled["verified"])
    return pulled


def build_card_parser() -> CommandParser:
    """The flags of `llmsys card`."""
    parser = CommandParser(prog="llmsys card", description="Write or refresh the model card (README.md) of FOLDER.")
    parser.add_argument("folder", metavar="FOLDER", help="a saved model, adapter or `llmsys clean` output folder")
    parser.add_argument("--repo_id", help="the Hub id the card names in its title and loading code")
    parser.add_argument("--base_model", help="Hub id of the base model (fine-tunes)")
    parser.add_argument("--dataset", action="append", dest="datasets", help="Hub id of a training dataset (repeat)")
    parser.add_argument("--license", help="licence identifier (default: the card's, else apache-2.0)")
    parser.add_argument("--hardware", help="hardware the training ran on, when train_results.json lacks it")
    parser.add_argument("--template", help="a Jinja2 template to use instead of the built-in one")
    return parser


def card_main(argv: list[str] | None = None) -> Path:
    """`llmsys card FOLDER`: write or refresh FOLDER/README.md and print its path."""
    args = build_card_parser().parse_args(argv)
    from ..hub.cards import write_model_card

    path = write_model_card(
        args.folder,
        repo_id=args.repo_id,
        base_model=args.base_model,
        datasets=args.datasets,
        license=args.license,
        hardware=args.hardware,
        template=args.template,
    )
    print(f"wrote {path}")
    return path
