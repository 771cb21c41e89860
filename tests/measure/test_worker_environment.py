"""The testbed workers' environment: glibc's allocator thresholds fixed, unless the user set them."""

from placer.testbed import FIXED_ALLOCATOR_THRESHOLDS, worker_environment

MMAP, TRIM = "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"


def test_by_default_the_thresholds_are_fixed(monkeypatch):
    monkeypatch.delenv(MMAP, raising=False)
    monkeypatch.delenv(TRIM, raising=False)
    env = worker_environment()
    assert {name: env[name] for name in FIXED_ALLOCATOR_THRESHOLDS} == FIXED_ALLOCATOR_THRESHOLDS
    assert int(env[MMAP]) >= 16 << 20, "a 16 MB tensor's buffers should come from the heap, not fresh pages"


def test_a_threshold_the_user_set_is_kept_and_the_other_left_alone(monkeypatch):
    monkeypatch.setenv(MMAP, "1048576")
    monkeypatch.delenv(TRIM, raising=False)
    env = worker_environment()
    assert env[MMAP] == "1048576" and TRIM not in env


def test_given_thresholds_replace_the_inherited_and_none_leaves_glibcs_default(monkeypatch):
    monkeypatch.setenv(MMAP, "1048576")
    monkeypatch.setenv(TRIM, "2097152")
    assert not {MMAP, TRIM} & set(worker_environment({}))
    assert worker_environment({MMAP: "4096"})[MMAP] == "4096" and TRIM not in worker_environment({MMAP: "4096"})


def test_placer_stays_importable_and_tensorflow_quiet(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    env = worker_environment()
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    import placer
    from pathlib import Path
    assert str(Path(placer.__file__).resolve().parents[1]) in env["PYTHONPATH"].split(":")
