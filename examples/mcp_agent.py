"""A scripted chat driving `reflexa mcp` through the MCP SDK's own client, over stdio.

No LLM here: SCRIPT is the tool calls a model would make. Set REFLEXA_URL,
REFLEXA_API_KEY and REFLEXA_NAMESPACE; run `python -m examples.mcp_agent`.
"""

import asyncio
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client

ROOM = "A locked door. A brass key lies on the table."
SCRIPT = [
    ("recall", {"state": ROOM, "task": "leave the room"}),
    ("log_step", {"task": "leave the room", "observation": ROOM, "action": "take the key"}),
    ("log_step", {"observation": "You hold the brass key.", "action": "unlock the door"}),
    ("end_episode", {"success": True, "reward": 1.0}),
    ("recall", {"state": ROOM, "task": "leave the room"}),
    ("report_outcome", {"success": True}),  # credits what the last recall served
    ("check_action", {"observation": ROOM, "action": "unlock the door"}),  # before acting: the risk
]


async def main() -> None:
    server = StdioServerParameters(command=sys.executable, args=["-m", "reflexa.cli", "mcp"], env=dict(os.environ))
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        retrieval_id = None
        for tool, arguments in SCRIPT:
            if tool == "report_outcome":
                arguments = {**arguments, "retrieval_ids": [retrieval_id]}
            result = await session.call_tool(tool, arguments)
            retrieval_id = (result.structured_content or {}).get("retrieval_id", retrieval_id)
            print(f"> {tool}({arguments})\n{result.content[0].text}\n", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
