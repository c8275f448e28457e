"""Outside agents for the training tests, written as a user would: against an OpenAI
``base_url``, with the official client, knowing nothing of ascent.

``openai_tools_agent`` makes two calls (offering a tool; a tool call, if the model makes one,
is answered), reports a reward for its first call to the session, and returns the episode's
reward: ``row_reward(row)``, a number the test can recompute from the row alone."""

import json

import httpx
import openai

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
FIRST_CALL_REWARD = 0.25


def opening(row: dict) -> list[dict]:
    """The row's prompt as messages (a chat row's prompt is its messages already)."""
    prompt = row["prompt"]
    return list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def row_reward(row: dict) -> float:
    """0, 0.5 or 1 by the prompt's last letter: differs between rows, fixed for one."""
    return (ord(opening(row)[-1]["content"][-1]) % 3) / 2


def _answer_tools(message: object) -> list[dict]:
    """Tool results for the calls the model made (an untrained model rarely makes one)."""
    results = []
    for call in message.tool_calls or []:
        try:
            arguments = json.loads(call.function.arguments)
            content = str(int(arguments["a"]) + int(arguments["b"]))
        except (ValueError, KeyError, TypeError) as bad:
            content = f"error: {bad}"
        results.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return results


async def openai_tools_agent(base_url: str, row: dict) -> dict:
    messages = opening(row)
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        first = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=[ADD], max_tokens=16
        )
        message = first.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        messages += _answer_tools(message) or [{"role": "user", "content": "again"}]
        async with httpx.AsyncClient() as http:
            reported = await http.post(
                f"{base_url}/reward", json={"reward": FIRST_CALL_REWARD, "call": 0}
            )
            reported.raise_for_status()
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=[ADD], max_tokens=16
        )
    return {"reward": row_reward(row), "acc": float(row_reward(row) == 1.0)}


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


async def openai_agents_sdk_agent(base_url: str, row: dict) -> float:
    """An OpenAI Agents SDK agent with a function tool, on the chat completions API."""
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool

    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
        agent = Agent(
            name="adder",
            instructions="Answer briefly; use the add tool for sums.",
            tools=[function_tool(add)],
            model=model,
        )
        prompt = opening(row)[-1]["content"]
        await Runner.run(agent, prompt, max_turns=2, run_config=RunConfig(tracing_disabled=True))
    return row_reward(row)


async def langgraph_react_agent(base_url: str, row: dict) -> float:
    """A LangGraph ReAct loop (model node, ``ToolNode``, ``tools_condition``) over
    ``langchain-openai``'s ``ChatOpenAI``."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    tools = [tool(add)]
    model = ChatOpenAI(
        model="gpt-4o-mini", base_url=base_url, api_key="unused", max_retries=0, max_tokens=16
    ).bind_tools(tools)

    async def think(state: MessagesState) -> dict:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", think)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    prompt = opening(row)[-1]["content"]
    await graph.compile().ainvoke({"messages": [("user", prompt)]}, {"recursion_limit": 5})
    return row_reward(row)


async def digit_agent(base_url: str, row: dict) -> dict:
    """Three one-token replies (a user says "again" between them); the episode succeeds as
    far as its replies are digits: reward = digit replies / 3, acc = all three were."""
    messages, hits = opening(row), 0
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        for _ in range(3):
            out = await client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, max_tokens=1
            )
            reply = out.choices[0].message
            text = (reply.content or "").strip()
            hits += bool(text) and text.isdigit()
            messages += [reply.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
    return {"reward": hits / 3, "acc": float(hits == 3)}


async def picture_agent(base_url: str, row: dict) -> float:
    """Two calls about the row's pictures, sent as ``image_url`` parts (a vision-language
    policy); the second call's history holds the first picture and a new one."""
    text = opening(row)[-1]["content"].replace("<image>", "").strip()
    pictures = [{"type": "image_url", "image_url": {"url": url}} for url in row["images"]]
    messages = [{"role": "user", "content": [{"type": "text", "text": text}, pictures[0]]}]
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        for turn in range(2):
            out = await client.chat.completions.create(
                model="gpt-4o", messages=messages, max_tokens=8
            )
            again = [{"type": "text", "text": "and this one?"}, *pictures[turn + 1 : turn + 2]]
            messages += [
                out.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": again},
            ]
    return row_reward(row)
