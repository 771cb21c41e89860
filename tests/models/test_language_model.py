"""The decoder-only language models: a stage per device, and schedules on them that behave as pipelines do."""

import pytest

from placer.cost import open_target, parse_target_spec
from placer.heuristics import make_heuristic
from placer.models import build_model, model_batch
from placer.models.language_model import SIZES, stage_of
from placer.schedule import gpipe, one_f_one_b
from placer.schedule.from_placement import blocks_from_placement

FOUR_H100 = "modeled:4xH100"


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def placed(request):
    graph = build_model(request.param, "tiny")
    with open_target(graph, parse_target_spec(FOUR_H100)) as target:
        placement = make_heuristic("expert", graph, target.devices, model=request.param)
        yield request.param, graph, target, placement


def test_scopes_name_the_embedding_every_block_and_the_head():
    assert stage_of("gpt2_1/block_11_1/qkv_1/MatMul") == "block_11"
    assert stage_of("gradient_tape/llama_1/block_3_1/down_1/MatMul_1") == "block_3"
    assert stage_of("gpt2_1/embedding_1/tokens_1/GatherV2") == "embedding"
    assert stage_of("gpt2_1/head_1/projection_1/MatMul") == "head"
    assert stage_of("adam/ResourceApplyAdam_7") is None


def test_the_expert_puts_consecutive_blocks_on_consecutive_gpus(placed):
    name, graph, target, placement = placed
    ops = placement.op_devices(graph)
    layers = SIZES[name]["tiny"].layers
    gpus = [d.name for d in target.devices if d.kind == "GPU"]
    for op in graph.ops:
        stage = stage_of(op.name)
        if stage and stage.startswith("block_"):
            assert ops[op.name] == gpus[int(stage.split("_")[1]) * len(gpus) // layers], op.name


def test_a_stage_per_device_is_one_forward_and_one_backward_block_per_gpu_in_a_chain(placed):
    _, graph, target, placement = placed
    template = blocks_from_placement(target.simulator, placement, 4)
    assert {b.name for b in template.blocks} == {f"{k}@GPU:{i}" for k in "fb" for i in range(4)}
    after = {b.name: set(b.after) for b in template.blocks}
    for i in range(1, 4):
        assert f"f@GPU:{i - 1}" in after[f"f@GPU:{i}"] and f"b@GPU:{i}" in after[f"b@GPU:{i - 1}"]


def test_gpipe_and_1f1b_bubbles_follow_the_pipeline_arithmetic_and_1f1b_keeps_less(placed):
    # Stages are near equal at tiny (the head's projection makes the last one the longest), so the bubble is
    # within a few points above (p - 1) / (M + p - 1); 1F1B keeps at most p micro-batches, GPipe all M.
    _, graph, target, placement = placed
    micro_batches = model_batch(placed[0], "tiny")
    template = blocks_from_placement(target.simulator, placement, micro_batches)
    arithmetic = 3 / (micro_batches + 3)
    plans = gpipe(template, micro_batches), one_f_one_b(template, micro_batches)
    for plan in plans:
        assert arithmetic - 0.01 <= plan.bubble_rate <= arithmetic + 0.15
    peak_gpipe, peak_1f1b = (max(plan.peak_memory().values()) for plan in plans)
    assert peak_1f1b * 2 <= peak_gpipe


def test_the_bubbles_are_the_arithmetic_of_the_stages_own_spans(placed):
    # (p - 1)/(M + p - 1) assumes equal stages; with the head's projection on the last, the slowest stage paces
    # the pipeline: (M - 1) t_max + sum t. GPipe and 1F1B meet that within a unit's rounding.
    from experiments.probes.pipeline_arithmetic import uneven_pipeline_bubble

    _, graph, target, placement = placed
    for micro_batches in (2, 4, 8):
        template = blocks_from_placement(target.simulator, placement, micro_batches)
        spans = [sum(b.span for b in template.blocks if b.devices == (d,)) for d in template.devices]
        expected = uneven_pipeline_bubble(spans, micro_batches)
        for plan in (gpipe(template, micro_batches), one_f_one_b(template, micro_batches)):
            assert plan.bubble_rate == pytest.approx(expected, abs=0.02)


def test_zb_h1_idles_less_than_1f1b_and_tessel_is_no_slower_than_the_best_standard_schedule(placed):
    from placer.schedule import tessel_fast, zero_bubble_h1

    _, graph, target, placement = placed
    micro_batches = 8
    template = blocks_from_placement(target.simulator, placement, micro_batches)
    split = blocks_from_placement(target.simulator, placement, micro_batches, split_weight_gradients=True)
    one_f_one_b_plan = one_f_one_b(template, micro_batches)
    assert zero_bubble_h1(split, micro_batches).bubble_rate <= one_f_one_b_plan.bubble_rate
    best = min(gpipe(template, micro_batches).makespan, one_f_one_b_plan.makespan)
    assert tessel_fast(template, micro_batches, time_limit=5).makespan <= best


def test_paper_sizes_hold_more_than_one_80_gb_gpu():
    # Adam's state (16 bytes a parameter) and each sequence's activations, as the module docstring counts them
    for name, parameters_m, sequence_gb, step_gb in (("gpt2", 163, 2.15 + 0.62, 180), ("llama", 268, 13.0 + 0.79, 225)):
        s = SIZES[name]["paper"]
        feed_forward = (3 if name == "llama" else 2) * s.d_model * s.d_ff
        parameters = s.layers * (4 * s.d_model ** 2 + feed_forward) + 2 * s.vocabulary * s.d_model
        layers = s.length * s.d_model * (68 + 10 * s.heads * s.length / s.d_model) * s.layers
        logits = 3 * s.length * s.vocabulary * 4
        assert parameters / 1e6 == pytest.approx(parameters_m, rel=0.02)
        assert (layers + logits) / 1e9 == pytest.approx(sequence_gb, rel=0.02)
        assert (16 * parameters + s.batch * (layers + logits)) / 1e9 == pytest.approx(step_gb, rel=0.02)
        assert step_gb > 80
