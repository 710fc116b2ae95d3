"""`llmsys verify FOLDER [--update]`: its parser (the check: ``hf_llmsys/checkpoints/verify.py``)."""

from __future__ import annotations

from .parsing import CommandParser


def build_parser() -> CommandParser:
    """The flags of `llmsys verify`."""
    parser = CommandParser(
        prog="llmsys verify", description="Check every weight file of FOLDER against its sha256 manifest."
    )
    parser.add_argument("folder", metavar="FOLDER", help="a folder written by save_pretrained / llmsys train / sft")
    parser.add_argument(
        "--update", action="store_true", help="record the files as they are now (accept a deliberate edit)"
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    """`llmsys verify FOLDER [--update]`."""
    args = build_parser().parse_args(argv)
    from ..checkpoints.verify import verify_checkpoint

    report = verify_checkpoint(args.folder, update=args.update)
    print_verify_report(report)
    return report


def print_verify_report(report: dict) -> None:
    """The command's one line: what was checked (or recorded)."""
    from ..checkpoints.weight_integrity import CHECKSUM_FILE

    if report["updated"]:
        print(f"{report['folder']}: recorded sha256 and sizes of {len(report['files'])} weight files")
    else:
        print(f"{report['folder']}: {len(report['files'])} weight files match {CHECKSUM_FILE}")
