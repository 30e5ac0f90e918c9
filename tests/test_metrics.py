"""Parsing verl's console lines (as Ray forwards them) and its file-logger JSONL. No cluster."""

import json
import random

from rayjobs.views import metricfiles
from rayjobs.views import logparse
from rayjobs.views.panel import LiveView, PlainView, status_line

PREFIX = "\x1b[36m(TaskRunner pid=4242)\x1b[0m "
STEP3 = (PREFIX + "step:3 - actor/pg_loss:np.float64(-0.0123) - critic/score/mean:np.float64(0.53) - "
         "critic/rewards/mean:0.52 - actor/kl_loss:np.float64(1.5e-05) - response_length/mean:np.float64(241.0) - "
         "timing_s/step:np.float64(2.5) - training/global_step:3 - training/epoch:0 - perf/throughput:np.float64(nan) - "
         "val-core/openai/gsm8k/reward/mean@1:np.float64(0.41) - actor/is_ok:True")
LOG = [
    "[rayjobs] attempt 2 of run r1 (metrics: /s/runs/p/r1/metrics.2.jsonl)",
    PREFIX + "Resuming from /ckpt/global_step_2",
    PREFIX + "Size of train dataloader: 10, Size of val dataloader: 1",
    PREFIX + "Total training steps: 20",
    PREFIX + "wandb: 🚀 View run r1 at: https://wandb.ai/rl-team/verl_examples/runs/abc123xy",
    "\rTraining Progress:  10%|#         | 2/20\rTraining Progress:  15%|#5        | 3/20",
    STEP3,
    PREFIX + "Final validation metrics: {'val-core/openai/gsm8k/reward/mean@1': np.float64(0.47), 'val-aux/x': 1}",
]


def test_clean_strips_ansi_and_keeps_the_last_tqdm_redraw():
    assert logparse.clean(PREFIX + "hello") == "(TaskRunner pid=4242) hello"
    assert logparse.clean(LOG[5]) == "Training Progress:  15%|#5        | 3/20"
    assert logparse.clean(PREFIX + "bar 1/5\rbar 2/5\r") == "(TaskRunner pid=4242) bar 2/5"
    assert logparse.clean("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b[1;31mred\x1b[0m") == "link red"
    block = logparse.clean_block("\n".join(LOG) + "\n")
    assert "\x1b" not in block and "\r" not in block and block.count("\n") == len(LOG)


def test_step_line_numbers_in_every_verl_format():
    step, data = logparse.parse_step(logparse.body(logparse.clean(STEP3)))
    assert step == 3
    assert data["actor/pg_loss"] == -0.0123 and data["critic/score/mean"] == 0.53
    assert data["critic/rewards/mean"] == 0.52 and data["actor/kl_loss"] == 1.5e-05
    assert data["training/global_step"] == 3 and data["actor/is_ok"] == 1.0
    assert data["perf/throughput"] != data["perf/throughput"]  # nan kept as nan
    assert data["val-core/openai/gsm8k/reward/mean@1"] == 0.41
    assert logparse.parse_step("no step here") is None
    assert logparse.number("np.float32(3)") == 3.0 and logparse.number("tensor(0.5)") == 0.5
    assert logparse.number("abc") is None


def test_progress_follows_a_whole_log():
    p = logparse.parse_lines(LOG)
    assert (p.step, p.total, p.attempt) == (3, 20, 2)
    assert p.wandb_url == "https://wandb.ai/rl-team/verl_examples/runs/abc123xy"
    assert p.resumed_from == "/ckpt/global_step_2"
    assert p.val == ("val-core/openai/gsm8k/reward/mean@1", 0.47, 3)  # the Final line wins over the step's
    labels = [label for label, _, _ in logparse.headline(p.last)]
    assert labels == ["score", "reward", "kl", "resp_len", "s/step"]
    assert p.eta_s() == 17 * 2.5
    line = status_line("job-1", "RUNNING", p)
    assert "step 3/20" in line and "ETA 0:42" in line and "score 0.53" in line and "W&B https://wandb.ai/" in line
    assert p.summary()["metrics"]["critic/score/mean"] == 0.53


def test_feed_block_skips_blocks_without_markers_and_matches_line_by_line():
    text = logparse.clean_block("\n".join(LOG) + "\n")
    a, b = logparse.Progress(), logparse.parse_lines(LOG)
    assert logparse.feed_block(a, text)
    assert (a.step, a.total, a.attempt, a.wandb_url, a.val) == (b.step, b.total, b.attempt, b.wandb_url, b.val)
    assert not logparse.feed_block(logparse.Progress(), "just\nnoise\n")


def test_line_splitter_any_chunking_gives_the_same_lines():
    raw = ("\n".join(LOG) + "\nlast line without newline").encode()
    for seed in range(20):
        rnd = random.Random(seed)
        s, out, i = logparse.LineSplitter(), [], 0
        while i < len(raw):
            n = rnd.randint(1, 40)
            out.append(s.feed_text(raw[i:i + n]))
            i += n
        text = "".join(out)
        assert text.split("\n")[:-1] == LOG
        assert s.flush() == ["last line without newline"]


def test_line_splitter_memory_is_bounded_for_endless_carriage_returns():
    s = logparse.LineSplitter(cap=1000)
    for i in range(2000):
        s.feed_text(f"\rbar {i}/2000".encode())
        assert len(s.buf) <= 1100
    assert s.flush()[0].endswith("bar 1999/2000")
    s = logparse.LineSplitter(cap=100)
    assert s.feed_text(b"x" * 250) == "x" * 250 + "\n"  # no newline, no \r: flushed as a line


def test_jsonl_read_merge_and_last(tmp_path):
    a1 = tmp_path / "metrics.1.jsonl"
    a2 = tmp_path / "metrics.2.jsonl"
    a10 = tmp_path / "metrics.10.jsonl"
    a1.write_text("".join(json.dumps({"step": s, "data": {"x": s, "tag": "a1"}}) + "\n" for s in (1, 2, 3, 4)) + '{"step": 5, "da')
    a2.write_text(json.dumps({"step": 2, "data": {"val-core/v": 0.5}}) + "\n"
                  + "".join(json.dumps({"step": s, "data": {"x": 10 * s}}) + "\n" for s in (3, 4, 5)))
    a10.write_text("")
    assert [p.name for p in metricfiles.jsonl_files(str(tmp_path))] == ["metrics.1.jsonl", "metrics.2.jsonl", "metrics.10.jsonl"]
    assert list(metricfiles.read_jsonl(a1))[-1] == (4, {"x": 4.0})  # torn line skipped, strings dropped
    merged = metricfiles.merge_attempts(metricfiles.read_jsonl(p) for p in (a1, a2))
    assert merged == {1: {"x": 1.0}, 2: {"x": 2.0, "val-core/v": 0.5}, 3: {"x": 30.0}, 4: {"x": 40.0}, 5: {"x": 50.0}}
    assert metricfiles.last_jsonl_record(a1) == (4, {"x": 4.0})
    assert metricfiles.jsonl_files(str(tmp_path / "absent")) == [] and metricfiles.jsonl_files(None) == []


def test_views_render_without_a_cluster(capsys):
    import io

    from rich.console import Console

    p = logparse.parse_lines(LOG)
    with PlainView() as v:
        v.write(logparse.clean_block("\n".join(LOG) + "\n"))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "step:3 - " in out
    view = LiveView("job-1", console=Console(file=io.StringIO(), force_terminal=True, width=120))
    from jobfactory import job_view

    view.job, view.progress = job_view("job-1", metadata={"sweep_overrides": '["algorithm.kl_ctrl.kl_coef=0.01"]'}), p
    plain = io.StringIO()
    Console(file=plain, width=120, color_system=None).print(view.render())
    shown = plain.getvalue()
    for want in ("RUNNING", "job-1", "kl_coef=0.01", "attempt 2", "step 3/20", "ETA", "score", "0.53", "kl", "1.5e-05",
                 "openai/gsm8k/reward/mean@1", "0.47", "https://wandb.ai/rl-team/verl_examples/runs/abc123xy"):
        assert want in shown, (want, shown)


def test_plot_keeps_jobs_without_data_in_the_legend(tmp_path, monkeypatch):
    # On the H200 a sweep's queued point had logged nothing yet and vanished from the plot.
    import matplotlib.axes

    from rayjobs.views import plot

    labels = []
    real_plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, *a, **k: (labels.append(k.get("label")), real_plot(self, *a, **k))[1])
    data = {"metrics": ["critic/score/mean"],
            "jobs": [{"id": "s-0", "label": "kl=0.001", "series": {"critic/score/mean": [[1, 0.1], [2, 0.2]]}},
                     {"id": "s-1", "label": "kl=0.1", "series": {"critic/score/mean": []}, "status": "RUNNING"},
                     {"id": "s-2", "label": "kl=1", "series": {"critic/score/mean": []}, "status": "FAILED"}]}
    out = plot.render(data, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert labels == ["kl=0.001", "kl=0.1 (nothing logged yet)", "kl=1 (nothing logged, FAILED)"]
    assert out.endswith("c.png")


def test_failure_line_is_the_last_exception_not_rays_wrapper():
    log = ("Traceback (most recent call last):\n"
           "\x1b[36m(TaskRunner pid=12)\x1b[0m ValueError: Total available GPUs 0 is less than total desired GPUs 2\n"
           "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=1, ip=127.0.0.1)\n"
           "[rayjobs] attempt finished with exit code 1\n")
    assert logparse.failure_line(logparse.clean_block(log)) == \
        "ValueError: Total available GPUs 0 is less than total desired GPUs 2"
    assert logparse.failure_line("step:1 - a:1\nKeyboardInterrupt\n") == "KeyboardInterrupt"
    assert logparse.failure_line("all fine\n") is None
