"""Write ``reflexa/async_client.py`` from ``reflexa/client.py`` (stdlib only, deterministic).

The two clients differ only in how they wait: requests, validation, retries and
parsing are built once in ``reflexa._operations`` and run by either transport. So
the async client is the sync one, transformed (the way unasync and qdrant-client's
generate_async_client.sh do it, in the other direction):

- every method of ``Client`` becomes ``async def``, except those in ``SYNC_METHODS``;
- a call of the transport's I/O (``self._transport.send/stream/close``) or of one of
  the client's own async methods is awaited;
- ``yield from xs`` becomes ``for item in xs: yield item`` (async generators cannot
  ``yield from``), ``async for`` where ``xs`` is a call of one of the client's own
  generators (an async generator then, iterated, not awaited);
- the names in ``RENAMES`` are renamed (whole tokens, never inside strings);
- a line tagged ``# sync-only`` is left out, with the statement it starts (a tagged
  ``def`` drops the method and the comments just above it): the local spool and the
  episode logger exist only in the sync client;
- the module and class docstrings are replaced by ``MODULE_DOC`` and ``CLASS_DOC``.

``with`` blocks stay ``with``: those in client.py hold local, synchronous resources
(the consistency session, the export file).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

RENAMES = {
    "Client": "AsyncClient",
    "SyncTransport": "AsyncTransport",
    "Iterator": "AsyncIterator",
    "close": "aclose",
    "__enter__": "__aenter__",
    "__exit__": "__aexit__",
}

#: Methods that do no I/O, so stay plain ``def``.
SYNC_METHODS = {"__init__", "_ns", "session_token"}

#: The transport methods that do I/O.
TRANSPORT_IO = {"send", "stream", "close"}

TAG = "# sync-only"

HEADER = "# Generated from reflexa/client.py by `python clients/python/tools/generate.py`: do not edit.\n"

MODULE_DOC = '''"""The asyncio client: the same methods as :class:`reflexa.Client`, awaited.

Requests, validation, retries and errors are shared with the sync client (see
:mod:`reflexa._operations`); only the waiting differs. To log an episode from
asyncio code, use :meth:`reflexa.Client.episode`: its ``step`` never blocks, and
``async with`` flushes without blocking the event loop.
"""'''

CLASS_DOC = '''"""An asyncio connection to a Reflexa server; arguments as for :class:`reflexa.Client`
    (which alone has the local spool: episodes are logged through it).

    Use it as an async context manager, or call :meth:`aclose`.
    """'''


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise ValueError(f"no class {name} in client.py")


def _char_col(line: str, byte_col: int) -> int:
    """ast columns count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8"))


def _dropped_lines(tree: ast.Module, lines: list[str]) -> set[int]:
    """0-based numbers of the lines left out: tagged ones, the statements they start,
    and the comments and blank line just above a dropped ``def``."""
    starts: dict[int, ast.stmt] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            starts.setdefault(first, node)
    dropped: set[int] = set()
    for number, line in enumerate(lines, start=1):
        if not line.rstrip().endswith(TAG):
            continue
        node = starts.get(number)
        end = node.end_lineno if node is not None and node.end_lineno else number
        dropped.update(range(number - 1, end))
        if isinstance(node, ast.FunctionDef):
            above = number - 2
            while above >= 0 and (lines[above].strip().startswith("#") or not lines[above].strip()):
                dropped.add(above)
                above -= 1
    return dropped


def generate(source: str) -> str:
    tree = ast.parse(source)
    lines = source.splitlines()
    client = _class(tree, "Client")
    async_methods = {
        node.name
        for node in client.body
        if isinstance(node, ast.FunctionDef) and node.name not in SYNC_METHODS and not _tagged(lines, node)
    }

    # Edits on the original text, keyed by position: (line, char col) -> text to insert.
    inserts: dict[tuple[int, int], str] = {}
    replaced: dict[int, list[str]] = {}
    for node in client.body:
        if not isinstance(node, ast.FunctionDef) or node.name not in async_methods:
            continue
        line = lines[node.lineno - 1]
        inserts[(node.lineno - 1, _char_col(line, node.col_offset))] = "async "
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call) and _awaited(inner.func, async_methods):
                line = lines[inner.lineno - 1]
                inserts[(inner.lineno - 1, _char_col(line, inner.col_offset))] = "await "
            if isinstance(inner, ast.Expr) and isinstance(inner.value, ast.YieldFrom):
                if inner.lineno != inner.end_lineno:
                    raise ValueError(f"line {inner.lineno}: a yield from over several lines")
                line = lines[inner.lineno - 1]
                indent = line[: len(line) - len(line.lstrip())]
                iterable = inner.value.value
                loop = (
                    "async for" if isinstance(iterable, ast.Call) and _awaited(iterable.func, async_methods) else "for"
                )
                segment = ast.get_source_segment(source, iterable)
                replaced[inner.lineno - 1] = [f"{indent}{loop} item in {segment}:", f"{indent}    yield item"]

    module_doc = tree.body[0]
    class_doc = client.body[0]
    if not (_is_docstring(module_doc) and _is_docstring(class_doc)):
        raise ValueError("client.py and Client must open with docstrings")
    for number in range(module_doc.lineno - 1, module_doc.end_lineno or module_doc.lineno):
        replaced[number] = []
    replaced[module_doc.lineno - 1] = [*HEADER.rstrip("\n").split("\n"), MODULE_DOC]
    for number in range(class_doc.lineno - 1, class_doc.end_lineno or class_doc.lineno):
        replaced[number] = []
    replaced[class_doc.lineno - 1] = ["    " + CLASS_DOC]

    dropped = _dropped_lines(tree, lines)
    out: list[str] = []
    for number, line in enumerate(lines):
        if number in dropped:
            continue
        if number in replaced:
            out.extend(replaced[number])
            continue
        for (at_line, col), text in sorted(inserts.items(), reverse=True):
            if at_line == number:
                line = line[:col] + text + line[col:]
        out.append(line)
    renamed = _rename("\n".join(out) + "\n")
    return "".join(_fit(line) if line.lstrip().startswith("async def ") else line for line in renamed.splitlines(True))


def _fit(line: str) -> str:
    """A one-line signature that ``async`` made too long, laid out as ruff format would."""
    if len(line.rstrip("\n")) <= 120:
        return line
    line = line.rstrip("\n")
    indent = line[: len(line) - len(line.lstrip())]
    opening, closing = line.index("(") + 1, line.rindex(")")
    inner = indent + "    " + line[opening:closing]
    if len(inner) > 120 or not line.endswith(":"):
        raise ValueError(f"too long once async, wrap it in client.py: {line.strip()}")
    return f"{line[:opening]}\n{inner}\n{indent}{line[closing:]}\n"


def _tagged(lines: list[str], node: ast.FunctionDef) -> bool:
    return lines[node.lineno - 1].rstrip().endswith(TAG)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _awaited(func: ast.expr, async_methods: set[str]) -> bool:
    """``self.<async method>(...)`` or ``self._transport.<I/O>(...)``."""
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    if isinstance(owner, ast.Name) and owner.id == "self":
        return func.attr in async_methods
    return (
        isinstance(owner, ast.Attribute)
        and owner.attr == "_transport"
        and isinstance(owner.value, ast.Name)
        and owner.value.id == "self"
        and func.attr in TRANSPORT_IO
    )


def _rename(text: str) -> str:
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NAME and token.string in RENAMES:
            (row, col), (_, end) = token.start, token.end
            edits.append((row - 1, col, end, RENAMES[token.string]))
    for row, col, end, new in sorted(edits, reverse=True):
        lines[row] = lines[row][:col] + new + lines[row][end:]
    result = "".join(lines)
    if re.search(r"\bsync-only\b", result):
        raise ValueError("a `# sync-only` tag is not at the end of its line")
    return result
