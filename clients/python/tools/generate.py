"""Regenerate the client's generated modules (stdlib only, deterministic):

- ``reflexa/_generated_models.py`` from ``openapi.json`` (see models_from_openapi.py);
- ``reflexa/async_client.py`` from ``reflexa/client.py`` (see async_from_sync.py).

    python clients/python/tools/generate.py          # rewrite them
    python clients/python/tools/generate.py --check  # exit 1 if any is out of date

Refresh ``openapi.json`` from the server first with export_openapi.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import async_from_sync  # noqa: E402
import models_from_openapi  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPENAPI = ROOT / "openapi.json"
COMMAND = "python clients/python/tools/generate.py"


def outputs() -> dict[Path, str]:
    """Every generated file and the text it should hold now."""
    document = json.loads(OPENAPI.read_text(encoding="utf-8"))
    client = (ROOT / "reflexa" / "client.py").read_text(encoding="utf-8")
    return {
        ROOT / "reflexa" / "_generated_models.py": models_from_openapi.generate(document),
        ROOT / "reflexa" / "async_client.py": async_from_sync.generate(client),
    }


def main(argv: list[str]) -> int:
    stale = []
    for path, text in outputs().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if "--check" not in argv:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT.parents[1])}", file=sys.stderr)
    if stale and "--check" in argv:
        names = ", ".join(str(p.relative_to(ROOT.parents[1])) for p in stale)
        print(f"out of date: {names}; run `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
