"""Rebuild the seeded catalog: ``python -m knowledge_base.seed --data DIR [--check]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from knowledge_base.seed import build_seed_catalog, seed_path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="../shared/data/centers", type=Path)
    parser.add_argument("--check", action="store_true", help="fail if catalog.json is stale")
    args = parser.parse_args()
    text = build_seed_catalog(args.data).model_dump_json(indent=1) + "\n"
    if args.check:
        if seed_path().read_text(encoding="utf-8") != text:
            print(f"{seed_path()} is stale; rebuild it", file=sys.stderr)
            return 1
        return 0
    seed_path().write_text(text, encoding="utf-8")
    print(f"wrote {seed_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
