"""Where a stage is cut into Ray Data blocks (`resources.ray_executor.blocks`, pure, no Ray)
and the Ray engine's settings (`build_engine("ray", ...)`): fast, no cluster."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.environment import build_engine
from resources.openai.placement import prefix_groups
from resources.ray_executor.blocks import block_groups_split, cut_blocks, default_rows


def _prompts(sizes: list[int]) -> list[str]:
    """Groups of the given sizes, in plan order: each group's prompts share a head of two or
    more full 16-token KV blocks (the planner's unit); with two groups or more, what all
    prompts share ends inside the first block (`Q: group ` and a digit or two)."""
    return [f"Q: group {g:03d} " + "plot words " * 20 + f"row {k}"
            for g, n in enumerate(sizes) for k in range(n)]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=30), st.integers(1, 15),
       st.sampled_from(["groups", "default"]))  # fmt: skip
def test_every_request_in_exactly_one_contiguous_block(sizes, rows, by):
    prompts = _prompts(sizes)
    blocks = cut_blocks(prompts, rows, by)
    assert [i for b in blocks for i in b] == list(range(len(prompts)))
    assert all(b and b == list(range(b[0], b[0] + len(b))) for b in blocks)
    assert all(len(b) <= rows for b in blocks)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=30), st.integers(1, 15))
def test_groups_cut_splits_only_groups_larger_than_a_block(sizes, rows):
    prompts = _prompts(sizes)
    assert prefix_groups(prompts) == [g for g, n in enumerate(sizes) for _ in range(n)]
    blocks = cut_blocks(prompts, rows, "groups")
    assert block_groups_split(prompts, blocks) == sum(1 for n in sizes if n > rows)
    # and packs: two neighbouring blocks of whole groups could not have been one
    groups = prefix_groups(prompts)
    whole = [all(sizes[groups[i]] <= rows for i in b) for b in blocks]
    for k in range(len(blocks) - 1):
        assert not (whole[k] and whole[k + 1]) or len(blocks[k]) + len(blocks[k + 1]) > rows


def test_default_cut_falls_inside_groups():
    prompts = _prompts([5, 5, 5])
    blocks = cut_blocks(prompts, 4, "default")
    assert [len(b) for b in blocks] == [4, 4, 4, 3]  # Ray's from_items cut: divmod, first longer
    assert block_groups_split(prompts, blocks) == 3
    assert block_groups_split(prompts, cut_blocks(prompts, 5, "groups")) == 0


def test_bad_block_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="block_rows must be >= 1, got 0"):
        cut_blocks(["a"], 0)
    with pytest.raises(ValueError, match="unknown block_by 'rows'"):
        cut_blocks(["a"], 1, "rows")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        default_rows(10, 0)
    assert cut_blocks([], 3) == [] and default_rows(100, 4) == 7


def test_ray_engine_reads_its_variables(monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_OPENAI_BASE_URL", "http://127.0.0.1:9/v1,http://127.0.0.1:10/v1")
    monkeypatch.setenv("LLM_ASSETS_OPENAI_MODEL", "m")
    monkeypatch.setenv("LLM_ASSETS_OPENAI_MAX_CONCURRENCY", "3")
    monkeypatch.setenv("LLM_ASSETS_RAY_BLOCK_BY", "default")
    monkeypatch.setenv("LLM_ASSETS_RAY_ADDRESS", "auto")
    engine = build_engine("ray", {"ray_block_rows": 7})
    cfg = engine.ray_config
    assert (cfg.ray_block_by, cfg.ray_address, cfg.ray_block_rows) == ("default", "auto", 7)
    assert engine.num_replicas == 2 and engine.name == "openai"
    assert engine.inner.max_concurrency == 3
    monkeypatch.setenv("LLM_ASSETS_RAY_BLOCK_BY", "rows")
    with pytest.raises(ValueError, match=r"^LLM_ASSETS_RAY_BLOCK_BY='rows': Input should be"):
        build_engine("ray", {})
    monkeypatch.delenv("LLM_ASSETS_RAY_BLOCK_BY")
    monkeypatch.delenv("LLM_ASSETS_OPENAI_MODEL")
    with pytest.raises(ValueError, match="needs model: set LLM_ASSETS_OPENAI_MODEL"):
        build_engine("ray", {})


def test_bad_executor_input_is_one_line_before_any_cluster():
    from resources.configs import OpenAIEngineConfig
    from resources.ray_executor.executor import execute_on_ray

    with pytest.raises(ValueError, match="needs at least one replica URL"):
        execute_on_ray([], OpenAIEngineConfig(model="m"))
    config = OpenAIEngineConfig(base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(ValueError, match="commit_every must be >= 1, got 0"):
        execute_on_ray([], config, commit_every=0)
