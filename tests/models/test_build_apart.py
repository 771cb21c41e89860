"""Paper-size steps built again at another batch are built in a process of their own, so that a search does not
keep a copy of the model's weights per build; the graph that comes back is the one the process built."""

import pytest

from placer.errors import GraphBuildError
from placer.models import build_model, build_model_apart


def test_a_paper_size_step_built_apart_is_the_step_built_here(monkeypatch):
    import subprocess

    started = []
    run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: started.append(a[0]) or run(*a, **k))
    apart = build_model_apart("two-tower", "paper", batch=32)
    assert any(argv[1:3] == ["-m", "placer.models.apart"] for argv in started)  # built in a child process
    here = build_model("two-tower", "paper", batch=32)
    assert apart.fingerprint == here.fingerprint and apart.name == here.name


def test_smaller_sizes_are_built_here_and_bad_input_is_refused_before_any_process_starts(monkeypatch):
    import subprocess

    run = subprocess.run

    def no_build_apart(argv, *args, **kwargs):
        if "placer.models.apart" in argv:
            pytest.fail("no process for a tiny build or bad input")
        return run(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", no_build_apart)
    assert build_model_apart("two-tower", "tiny", batch=8).fingerprint == build_model("two-tower", "tiny", 8).fingerprint
    with pytest.raises(GraphBuildError, match="batch must be a positive whole number, got 0"):
        build_model_apart("two-tower", "paper", batch=0)
    with pytest.raises(Exception, match="size"):
        build_model_apart("two-tower", "huge")
