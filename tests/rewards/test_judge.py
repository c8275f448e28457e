"""The generative judge against real HTTP servers: a small grading server in a thread (it
counts the digits of the graded answer and replies ``... Grade: N``, or sleeps, fails or
rambles when the answer asks it to), ``ascent serve`` on the tiny model, and a short RL run
whose reward is the judge's grade."""

import asyncio
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from pydantic import ValidationError

from ascent.batch import Batch
from ascent.config import load_config
from ascent.models import load_tokenizer
from ascent.rewards.judge import Judge, JudgeConfig, JudgeUnreachable, prompt_text
from ascent.rollout.server_process import free_port
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.plan import make_plan
from tests.servers import ascent_serve
from tests.trainer.rl_setup import config, metric

# Braces that are not placeholders stay as written.
TEMPLATE = 'Q: {prompt}\nA: <<{response}>>\nTruth: {ground_truth}\nRubric: {"per digit": 1}\n'
ANSWER = re.compile(r"<<(.*)>>\nTruth:", flags=re.DOTALL)


def digits(text: str) -> int:
    return sum(c in "0123456789" for c in text)


class GradingServer(ThreadingHTTPServer):
    """``/v1/chat/completions``: grades the answer between << and >> by its digit count (after
    ``delay`` seconds); an answer starting with SLEEP makes it sleep 3 s, FAIL answer 500, JUNK
    reply without a grade. Records every request and the most requests in flight at once."""

    daemon_threads, block_on_close = True, False
    # socketserver's listen backlog is 5: a judge with 32 requests in flight would see
    # connections reset on a busy machine (the judge counts them; this test wants none).
    request_queue_size = 128

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), GradingHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.delay, self.requests, self.lock = delay, [], threading.Lock()
        self.in_flight = self.max_in_flight = 0

    def reply(self, answer: str) -> tuple[int, str]:
        time.sleep(3.0 if answer.startswith("SLEEP") else self.delay)
        if answer.startswith("FAIL"):
            return 500, "overloaded"
        if answer.startswith("JUNK"):
            return 200, "I would rather not say."
        return 200, f"I read 99 characters. Grade: {digits(answer)}"  # the last number counts


class GradingHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.requests.append({"path": self.path, "headers": dict(self.headers), **body})
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
            answer = ANSWER.search(body["messages"][-1]["content"]).group(1)
            status, text = server.reply(answer)
        finally:
            with server.lock:
                server.in_flight -= 1
        reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        payload = json.dumps(reply if status == 200 else {"error": text}).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def grading_server():
    servers = []

    def start(delay: float = 0.0) -> GradingServer:
        server = GradingServer(delay)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def judge_config(url: str, **fields) -> JudgeConfig:
    defaults = {"model": "grader", "template": TEMPLATE, "min_grade": 0, "max_grade": 4}
    return JudgeConfig(url=url, **defaults | fields)


def test_scores_are_the_grades_normalised_and_the_template_is_filled_literally(
    grading_server,
):
    server = grading_server(delay=0.2)
    responses = ["a1b2", "12345678", "none", "{prompt} 7", "9", "x0"]
    truths = ["42", {"target": 3}, None, "t", "t", "t"]
    prompts = ["say 12", "add", "p", "q", "r", "s"]
    config = judge_config(server.url, system="Be strict.", concurrency=3, max_tokens=7)
    with Judge(config) as judge:
        graded = judge.grade(prompts, responses, truths)
    expected = [min(digits(r) / 4, 1.0) for r in responses]
    assert graded.scores.dtype == torch.float32
    assert graded.scores.tolist() == pytest.approx(expected)
    assert graded.grades.tolist() == [2, 8, 0, 1, 1, 1]
    assert graded.counts == {"judge/timeouts": 0, "judge/unparsable": 0, "judge/errors": 0}
    assert server.max_in_flight == 3  # in parallel, never more than judge.concurrency
    sent = {r["messages"][-1]["content"]: r for r in server.requests}
    assert len(sent) == len(responses)
    first = sent['Q: say 12\nA: <<a1b2>>\nTruth: 42\nRubric: {"per digit": 1}\n']
    assert first["path"] == "/v1/chat/completions" and first["model"] == "grader"
    assert first["messages"][0] == {"role": "system", "content": "Be strict."}
    assert first["max_tokens"] == 7 and first["temperature"] == 0
    assert any('Q: add\nA: <<12345678>>\nTruth: {"target": 3}\n' in text for text in sent)
    assert any("Q: p\nA: <<none>>\nTruth: \n" in text for text in sent)  # None: empty
    assert any("Q: q\nA: <<{prompt} 7>>" in text for text in sent)  # not replaced again


def test_a_judge_slower_than_its_time_limit_counts_timeouts_and_returns_in_time(
    grading_server,
):
    server = grading_server()
    with Judge(judge_config(server.url, timeout_s=0.5, concurrency=4)) as judge:
        began = time.monotonic()
        graded = judge.grade(["p"] * 4, ["SLEEP 1", "SLEEP 2", "SLEEP 3", "4"], ["t"] * 4)
        elapsed = time.monotonic() - began
    assert elapsed < 1.5  # < 3 x timeout_s
    assert graded.counts == {"judge/timeouts": 3, "judge/unparsable": 0, "judge/errors": 0}
    assert graded.scores.tolist() == [0, 0, 0, 0.25]
    assert graded.grades[:3].isnan().all()
    with Judge(judge_config(server.url, timeout_s=0.3)) as judge:  # all timed out: counted
        assert judge.grade(["p"] * 2, ["SLEEP"] * 2, ["t"] * 2).counts["judge/timeouts"] == 2


def test_unparsable_grades_and_server_errors_are_counted_and_reported_once(grading_server, capsys):
    server = grading_server()
    with Judge(judge_config(server.url, retries=2)) as judge:
        graded = judge.grade(["p"] * 4, ["JUNK", "FAIL", "7", "77"], ["t"] * 4)
        assert graded.counts == {"judge/timeouts": 0, "judge/unparsable": 1, "judge/errors": 1}
        assert graded.scores.tolist() == [0, 0, 0.25, 0.5]
        assert judge.grade(["p"] * 2, ["JUNK"] * 2, ["t"] * 2).counts["judge/unparsable"] == 2
    failing = [r for r in server.requests if "<<FAIL>>" in r["messages"][-1]["content"]]
    assert len(failing) == 3  # a 5xx is retried judge.retries times
    printed = capsys.readouterr().out
    assert printed.count("judge: grading failed") == 1 and "response='JUNK'" in printed


def test_a_judge_that_is_not_there_is_an_error_naming_its_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with Judge(judge_config(url)) as judge:
        with pytest.raises(JudgeUnreachable, match=re.escape(f"{url}/chat/completions")):
            judge.grade(["p", "q"], ["1", "2"], ["t", "t"])
        alone = judge.grade(["p"], ["1"], ["t"])  # one sample: counted, like any failure
    assert alone.counts["judge/errors"] == 1 and alone.scores.tolist() == [0]


def test_grading_from_a_thread_whose_event_loop_is_running(grading_server):
    server = grading_server()

    async def caller() -> torch.Tensor:
        with Judge(judge_config(server.url)) as judge:
            return judge.grade(["p"], ["12"], ["t"]).scores

    assert asyncio.run(caller()).tolist() == [0.5]


def test_the_api_key_comes_from_the_named_environment_variable(grading_server, monkeypatch):
    server = grading_server()
    with pytest.raises(ValueError, match="JUDGE_TEST_KEY"):
        Judge(judge_config(server.url, api_key_env="JUDGE_TEST_KEY"))
    monkeypatch.setenv("JUDGE_TEST_KEY", "secret")
    with Judge(judge_config(server.url, api_key_env="JUDGE_TEST_KEY")) as judge:
        judge.grade(["p"], ["1"], ["t"])
    assert server.requests[0]["headers"]["Authorization"] == "Bearer secret"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"template": "Grade {prompt}"}, "template"),
        ({"grade_pattern": "(\\d+"}, "grade_pattern"),
        ({"grade_pattern": "\\d+"}, "grade_pattern"),
        ({"min_grade": 5, "max_grade": 5}, "max_grade"),
    ],
)
def test_the_config_refuses_what_cannot_work(fields, named):
    values = {"url": "http://x/v1", "model": "m", "template": TEMPLATE} | fields
    with pytest.raises(ValidationError, match=named):
        JudgeConfig(**values)


def test_the_prompt_text_of_chat_and_raw_prompts():
    assert prompt_text("plain") == "plain"
    assert prompt_text([{"role": "user", "content": "hi"}]) == "hi"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert prompt_text(messages) == "system: be brief\nuser: hi"


def test_ascent_serve_as_the_judge(tiny_model, tmp_path):
    """An untrained model writes random bytes: each sample is a grade (normalised, clamped)
    or counted unparsable; with this seed, both happen."""
    flags = ["--max-model-len", "512", "--served-model-name", "tiny", "--seed", "0"]
    with ascent_serve(tiny_model, tmp_path / "server.log", *flags) as server:
        config = judge_config(f"{server.url}/v1", model="tiny", max_tokens=64, temperature=1.0)
        with Judge(config) as judge:
            graded = judge.grade(["say 3", "say 9", "hi", "a"], ["3", "33", "x", "0"], ["3"] * 4)
    parsed = ~graded.grades.isnan()
    assert graded.counts["judge/timeouts"] == graded.counts["judge/errors"] == 0
    assert int(parsed.sum()) + graded.counts["judge/unparsable"] == 4
    assert ((graded.scores >= 0) & (graded.scores <= 1)).all()
    assert (graded.scores[~parsed] == 0).all()
    assert torch.equal(graded.scores[parsed], (graded.grades[parsed] / 4).clamp(0, 1).float())


def test_an_rl_run_trains_on_the_judges_grades(grading_server, tiny_model, prompts, tmp_path):
    server = grading_server()
    dumps = tmp_path / "dumps"
    result = train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path / "run",
            "reward.function_weight=0",
            f"judge.url={server.url}",
            "judge.model=grader",
            f"judge.template={json.dumps(TEMPLATE)}",
            "judge.max_grade=8",
            "trainer.total_steps=2",
            "trainer.val_every=2",
            f"trainer.dump_rollouts={dumps}",
        )
    )
    tokenizer = load_tokenizer(tiny_model)
    for step in (1, 2):
        batch = Batch.load(dumps / f"step_{step:08d}")
        lengths = batch["response_mask"].sum(-1).tolist()
        texts = [
            tokenizer.decode(row[:n], skip_special_tokens=True)
            for row, n in zip(batch["responses"], lengths, strict=True)
        ]
        expected = torch.tensor([min(digits(text) / 8, 1.0) for text in texts])
        assert torch.equal(batch["judge_scores"], expected)
        assert torch.equal(batch["scores"], expected)  # function weight 0, judge weight 1
    assert len(server.requests) == 2 * 64 + 16  # two steps of 64 answers, 16 validation ones
    for key in ("judge/timeouts", "judge/unparsable", "judge/errors"):
        assert metric(tmp_path / "run", key) == [0, 0]
    assert len(metric(tmp_path / "run", "reward/judge/std")) == 2
    (_, validation) = result["validation"][-1]
    assert 0 <= validation["val/digits/judge_score"] <= 1


def test_a_judge_cannot_grade_agent_episodes_yet():
    judge = ["judge.url=http://x/v1", "judge.model=m", "judge.template='{response}'"]
    agent = ["rollout.agent.max_turns=2", "model.path=/m", "data.train_files=[t.parquet]"]
    with pytest.raises(ValueError, match=r"judge cannot grade rollout\.agent episodes"):
        make_plan(load_config(RLConfig, None, [*judge, *agent]))
