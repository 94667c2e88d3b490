"""The warm-start cache: computed once per key, loaded bit for bit, corrupt entries recomputed."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

from constrained_grpo.agents.lm_sft import (
    SFTResult,
    cached_warm_start,
    warmstart_cache,
    warmstart_cache_dir,
    warmstart_key,
)
from constrained_grpo.agents.lm_transformer import CharTokenizer, TinyCausalLM, TinyLMConfig
from constrained_grpo.agents.text_agent import TextGRPOAgent

MATH = "Math/ChainSum-v0"
PAIRS = [(f"What is {a} + {b}?\n", f"#### {a + b}") for a in range(6) for b in range(6)]


def tiny_model(seed: int = 0) -> TinyCausalLM:
    torch.manual_seed(seed)
    tok = CharTokenizer()
    return TinyCausalLM(TinyLMConfig(vocab_size=tok.vocab_size, context=48, d_model=16, n_layers=1, n_heads=2, d_ff=32), tok)


def warm(cache: Path | None, seed: int = 0, lr: float = 3e-3, log: list | None = None) -> tuple[TinyCausalLM, SFTResult]:
    model = tiny_model(seed)
    key = {"seed": seed, "architecture": "tiny-16"}
    result = cached_warm_start(model, PAIRS, 6, 8, lr, seed=seed, model_key=key, cache_dir=cache,
                               log=None if log is None else log.append)
    return model, result


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def test_cache_loads_the_computed_weights_bit_for_bit(tmp_path: Path):
    plain, plain_result = warm(None)
    first, first_result = warm(tmp_path)
    assert_same_weights(plain, first)
    assert not first_result.cached and first_result.final_loss == plain_result.final_loss
    assert len(list(tmp_path.glob("*.safetensors"))) == 1

    rows: list[dict] = []
    second, second_result = warm(tmp_path, log=rows)
    assert_same_weights(plain, second)
    assert second_result.cached and second_result.final_loss == plain_result.final_loss
    assert second_result.steps == 6 and not second.training


def test_log_rows_are_replayed_from_the_cache(tmp_path: Path):
    runs = []
    for _ in range(2):
        rows: list[dict] = []
        result = cached_warm_start(tiny_model(), PAIRS, 10, 4, 3e-3, seed=0, model_key={"seed": 0},
                                   cache_dir=tmp_path, log=rows.append, log_every=5)
        runs.append((result, rows))
    (computed, computed_rows), (loaded, loaded_rows) = runs
    assert [r["sft_step"] for r in computed_rows] == [5, 10]
    assert loaded_rows == computed_rows and loaded.cached and not computed.cached


def test_the_key_changes_with_seed_settings_architecture_and_demonstrations():
    base = warmstart_key({"seed": 0, "d_model": 16}, PAIRS, {"steps": 6, "lr": 3e-3})[0]
    assert base == warmstart_key({"d_model": 16, "seed": 0}, list(PAIRS), {"lr": 3e-3, "steps": 6})[0]
    others = {
        warmstart_key({"seed": 1, "d_model": 16}, PAIRS, {"steps": 6, "lr": 3e-3})[0],
        warmstart_key({"seed": 0, "d_model": 32}, PAIRS, {"steps": 6, "lr": 3e-3})[0],
        warmstart_key({"seed": 0, "d_model": 16}, PAIRS, {"steps": 7, "lr": 3e-3})[0],
        warmstart_key({"seed": 0, "d_model": 16}, PAIRS, {"steps": 6, "lr": 2e-3})[0],
        warmstart_key({"seed": 0, "d_model": 16}, PAIRS[:-1], {"steps": 6, "lr": 3e-3})[0],
        warmstart_key({"seed": 0, "d_model": 16}, [(p, c + " ") for p, c in PAIRS], {"steps": 6, "lr": 3e-3})[0],
    }
    assert base not in others and len(others) == 6


def test_another_seed_or_lr_writes_another_entry(tmp_path: Path):
    warm(tmp_path, seed=0)
    warm(tmp_path, seed=1)
    warm(tmp_path, seed=0, lr=2e-3)
    warm(tmp_path, seed=0)
    assert len(list(tmp_path.glob("*.safetensors"))) == 3


@pytest.mark.parametrize("damage", ["truncate", "flip", "no_weights", "bad_json"])
def test_a_corrupt_entry_is_recomputed_with_a_warning(tmp_path: Path, damage: str):
    plain, _ = warm(None)
    warm(tmp_path)
    weights = next(tmp_path.glob("*.safetensors"))
    meta = weights.with_suffix(".json")
    data = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "flip":  # a byte of a tensor: safetensors still parses, the checksum does not match
        weights.write_bytes(data[:-1] + bytes([data[-1] ^ 0x01]))
    elif damage == "no_weights":
        weights.unlink()
    else:
        meta.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable.*recomputing") as caught:
        again, result = warm(tmp_path)
    assert len(caught) == 1 and not result.cached
    assert_same_weights(plain, again)
    # Rewritten whole: the next run loads it silently.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded, result = warm(tmp_path)
    assert result.cached
    assert_same_weights(plain, loaded)


def test_a_second_worker_waits_on_the_lock_and_loads(tmp_path: Path):
    import fcntl

    warm(tmp_path)  # to learn the entry's name
    stem = next(tmp_path.glob("*.safetensors")).with_suffix("")
    for suffix in (".json", ".safetensors"):
        stem.with_suffix(suffix).unlink()
    results: list[SFTResult] = []
    with open(stem.with_suffix(".lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # a first worker is computing
        worker = threading.Thread(target=lambda: results.append(warm(tmp_path)[1]))
        worker.start()
        time.sleep(0.3)
        assert worker.is_alive() and not results  # blocked on the lock, not computing
        warm(tmp_path / "elsewhere")  # the first worker's computation, written where the second waits
        for src in (tmp_path / "elsewhere").glob(f"{stem.name}.*"):
            if src.suffix != ".lock":
                stem.with_suffix(src.suffix).write_bytes(src.read_bytes())
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    worker.join(30)
    assert results and results[0].cached


def test_the_cache_directory_comes_from_the_context_then_the_environment(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("CGRPO_WARMSTART_CACHE", raising=False)
    assert warmstart_cache_dir() is None
    monkeypatch.setenv("CGRPO_WARMSTART_CACHE", str(tmp_path / "env"))
    assert warmstart_cache_dir() == tmp_path / "env"
    with warmstart_cache(tmp_path / "ctx"):
        assert warmstart_cache_dir() == tmp_path / "ctx"
    assert warmstart_cache_dir() == tmp_path / "env"


@pytest.mark.slow
def test_text_agents_train_identically_from_a_cached_warm_start(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("CGRPO_WARMSTART_CACHE", raising=False)

    def train(cache: Path | None) -> tuple[TextGRPOAgent, list[dict]]:
        with warmstart_cache(cache):
            agent = TextGRPOAgent(MATH, seed=3, preset="quick", algo="cgrpo")
        records: list[dict] = []
        agent.learn(32, records.append)
        return agent, [{k: v for k, v in r.items() if not k.endswith("_s")} for r in records]

    plain, plain_log = train(None)
    computed, computed_log = train(tmp_path)
    loaded, loaded_log = train(tmp_path)
    assert not computed.sft_result.cached and loaded.sft_result.cached
    assert len(list(tmp_path.glob("*.safetensors"))) == 1
    assert plain_log == computed_log == loaded_log and len(plain_log) == 2
    assert plain_log[-1]["grad_norm"] > 0  # the second iteration updates the policy
    assert_same_weights(plain.policy, computed.policy)
    assert_same_weights(plain.policy, loaded.policy)


def test_harness_runs_of_a_task_and_seed_share_one_warm_start(tmp_path: Path, monkeypatch):
    from constrained_grpo.eval.scoring.loader import load_results
    from constrained_grpo.eval.runner import WARMSTART_DIR, RunSpec, execute_run, task_meta

    import constrained_grpo.agents.lm_sft as lm_sft

    monkeypatch.delenv("CGRPO_WARMSTART_CACHE", raising=False)
    computed: list[int] = []
    real = lm_sft.supervised_warm_start
    monkeypatch.setattr(lm_sft, "supervised_warm_start", lambda *a, **k: computed.append(1) or real(*a, **k))
    meta = task_meta(MATH)
    for algo in ("ref-warmstart", "grpo"):
        outcome = execute_run(RunSpec(MATH, algo, 0, 16, 53, {"preset": "quick"}, False), tmp_path, meta=meta)
        assert outcome.status == "done", outcome.error
    entries = list((tmp_path / WARMSTART_DIR).glob("*.json"))
    assert len(entries) == 1 and computed == [1]  # computed by the first run, loaded by the second
    assert set(load_results(tmp_path).table["algo"]) == {"ref-warmstart", "grpo"}  # the cache is not a run
