"""Command-line entry point: ``openclaw-voice``."""
import sys


def main(argv: list[str] | None = None) -> int:
    raise SystemExit("not yet")
