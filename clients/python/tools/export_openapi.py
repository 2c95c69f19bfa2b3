"""Write the server's OpenAPI document to clients/python/openapi.json, the document the
client's models are generated from (``python clients/python/tools/generate.py``).

This is the one server-side step: it needs the server installed (it calls
``service.app.create_app``); the generator and the client package never import it.

    python clients/python/tools/export_openapi.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OPENAPI = Path(__file__).resolve().parents[1] / "openapi.json"


def render(document: dict) -> str:
    """The committed form: two-space indents, the server's key order, UTF-8."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    from service.app import create_app

    OPENAPI.write_text(render(create_app().openapi()), encoding="utf-8")
    print(f"wrote {OPENAPI}", file=sys.stderr)


if __name__ == "__main__":
    main()
