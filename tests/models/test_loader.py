"""Model specs: a built-in name, `module:function` or `file.py:function` becomes an OpGraph, or one clear error."""

import sys
import textwrap

import pytest

from placer.errors import GraphBuildError
from placer.graph import OpGraph
from placer.models import check_model_spec, is_builtin_model, load_model, rebuildable_batch

# A user's model file: a tiny graph-mode training step, one builder that takes the size and one that does not.
MODEL_FILE = """
import tensorflow as tf

from placer.graph import graph_from_function

BATCH = {"tiny": 2, "small": 8}


def _step(batch):
    x = tf.random.uniform((batch, 4), name="features")
    w = tf.compat.v1.get_variable("w", (4, 2))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w)), name="loss")
    return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train"), loss


def sized(size):
    return graph_from_function(lambda: _step(BATCH[size]), name=f"{NAME}-{size}")


def fixed():
    return graph_from_function(lambda: _step(2), name=f"{NAME}-fixed")


def broken():
    raise RuntimeError("the dataset is not there\\nsecond line of the message")


def not_a_graph():
    return {"train_op": "train"}


def needs_arguments(layers, size="tiny"):
    return fixed()


def batched(size="tiny", batch=6):
    return graph_from_function(lambda: _step(batch), name=f"{NAME}-batched")


def batch_without_default(batch):
    return fixed()


NAME = "user"
"""


def _write(directory, name, text):
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def model_file(tmp_path):
    return _write(tmp_path, "my_model.py", MODEL_FILE)


def test_file_function_with_a_size_parameter_is_built_at_that_size(model_file):
    tiny = load_model(f"{model_file}:sized", "tiny")
    small = load_model(f"{model_file}:sized", size="small")
    assert isinstance(tiny, OpGraph) and (tiny.name, small.name) == ("user-tiny", "user-small")
    assert tiny.fingerprint != small.fingerprint


def test_file_function_without_a_size_parameter_is_called_with_no_arguments(model_file):
    assert load_model(f"{model_file}:fixed", "small").name == "user-fixed"


def test_relative_file_path_is_read_from_the_current_directory(model_file, monkeypatch):
    monkeypatch.chdir(model_file.parent)
    assert load_model("my_model.py:fixed").name == "user-fixed"


def test_two_files_with_the_same_name_do_not_share_a_module(tmp_path):
    first = _write(tmp_path, "model.py", MODEL_FILE)
    (tmp_path / "other").mkdir()
    second = _write(tmp_path / "other", "model.py", MODEL_FILE.replace('NAME = "user"', 'NAME = "other"'))
    assert load_model(f"{first}:fixed").name == "user-fixed"
    assert load_model(f"{second}:fixed").name == "other-fixed"
    assert load_model(f"{first}:fixed").name == "user-fixed"
    assert "model" not in sys.modules


def test_module_function_spec_is_imported_from_the_python_path(tmp_path, monkeypatch):
    package = tmp_path / "user_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    _write(package, "dense.py", MODEL_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_model("user_models.dense:sized", "small").name == "user-small"


def test_an_op_graph_passes_through_unchanged(model_file):
    graph = load_model(f"{model_file}:fixed")
    assert load_model(graph, "paper") is graph
    check_model_spec(graph)


def test_built_in_models_are_recognised_by_name():
    assert is_builtin_model("mlp") and is_builtin_model("nmt-2")
    assert not is_builtin_model("placer.models.mlp:mlp_graph") and not is_builtin_model(None)


def test_unknown_name_lists_the_built_in_models_and_the_spec_forms():
    with pytest.raises(GraphBuildError) as refused:
        load_model("resnet-9000")
    message = str(refused.value)
    assert "did you mean 'resnet-50'" in message and "two-tower" in message
    assert "package.module:function" in message and "path/to/file.py:function" in message


def test_missing_file_is_named(tmp_path):
    with pytest.raises(GraphBuildError, match=r"model file .*nowhere\.py does not exist"):
        load_model(f"{tmp_path / 'nowhere.py'}:build")


def test_missing_function_is_named_with_the_functions_the_file_defines(model_file):
    with pytest.raises(GraphBuildError, match=r"has no function 'build' \(it defines batch_without_default, batched, broken, fixed, needs_arguments"):
        load_model(f"{model_file}:build")


def test_something_that_is_not_a_function_is_refused(model_file):
    with pytest.raises(GraphBuildError, match="'BATCH' in .* is a dict, not a function"):
        load_model(f"{model_file}:BATCH")


def test_syntax_error_in_the_file_names_the_file_and_line_without_a_traceback(tmp_path):
    path = _write(tmp_path, "typo.py", "def build():\n    return (\n")
    with pytest.raises(GraphBuildError) as refused:
        load_model(f"{path}:build")
    message = str(refused.value)
    assert f"model file {path} failed while loading" in message and "SyntaxError" in message and "line" in message
    assert "\n" not in message and "Traceback" not in message


def test_exception_while_executing_the_file_names_the_file_and_the_error(tmp_path):
    path = _write(tmp_path, "crashes.py", "import json\nCONFIG = json.loads('{')\n")
    with pytest.raises(GraphBuildError, match=r"crashes\.py failed while loading.*JSONDecodeError"):
        load_model(f"{path}:build")
    with pytest.raises(GraphBuildError, match="failed while loading"):  # not left half-loaded for the next try
        load_model(f"{path}:build")


def test_module_that_does_not_import_is_named(tmp_path, monkeypatch):
    with pytest.raises(GraphBuildError, match="cannot import module 'no_such_models.vision' .*ModuleNotFoundError"):
        load_model("no_such_models.vision:build")
    _write(tmp_path, "typo_models.py", "def build(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(GraphBuildError, match=r"cannot import module 'typo_models' .*SyntaxError: .*\(typo_models.py, line 1\)"):
        load_model("typo_models:build")


def test_function_that_raises_is_named_with_the_exception_type_and_first_line(model_file):
    with pytest.raises(GraphBuildError) as refused:
        load_model(f"{model_file}:broken")
    message = str(refused.value)
    assert f"model function '{model_file}:broken' raised RuntimeError: the dataset is not there" in message
    assert "second line" not in message
    assert isinstance(refused.value.__cause__, RuntimeError)  # Python callers still get the traceback


def test_function_returning_something_else_says_what_it_returned_and_how_to_build_a_graph(model_file):
    with pytest.raises(GraphBuildError) as refused:
        load_model(f"{model_file}:not_a_graph")
    message = str(refused.value)
    assert "returned a dict ({'train_op': 'train'}), not an OpGraph" in message
    assert "graph_from_function" in message and "graph_from_keras" in message


def test_function_that_needs_other_arguments_is_refused_before_it_runs(model_file):
    with pytest.raises(GraphBuildError, match=r"needs arguments \(layers\)"):
        load_model(f"{model_file}:needs_arguments")


def test_check_refuses_bad_specs_without_building_or_importing(tmp_path):
    never_run = _write(tmp_path, "never_run.py", "raise SystemExit('executed')\n")
    check_model_spec(f"{never_run}:build")
    check_model_spec("no_such_models.vision:build")  # importing is load_model's job
    check_model_spec("mlp", "small")
    for spec, reason in [("resnet-9000", "not a built-in model"), (f"{tmp_path / 'gone.py'}:build", "does not exist"),
                         ("models/vision:build", "does not end in .py"), ("my models:build", "not a module name"),
                         ("my_models.vision:", "names no function"), (":build", "not a built-in model")]:
        with pytest.raises(GraphBuildError, match=reason):
            check_model_spec(spec)
    with pytest.raises(GraphBuildError, match="unknown size 'huge'"):
        check_model_spec("mlp", "huge")
    with pytest.raises(GraphBuildError, match="got a list"):
        check_model_spec(["mlp"])


def test_a_model_function_with_a_batch_parameter_is_built_at_another_batch_and_one_without_is_refused(model_file):
    assert rebuildable_batch(f"{model_file}:batched") == 6
    assert load_model(f"{model_file}:batched", batch=3).op("features/RandomUniform").output_shapes == ((3, 4),)
    assert load_model(f"{model_file}:batched").op("features/RandomUniform").output_shapes == ((6, 4),)
    assert rebuildable_batch(f"{model_file}:fixed") is None  # an OpGraph: nothing says how to build it at another
    with pytest.raises(GraphBuildError, match=r"has no `batch` parameter, so it cannot be built at batch 3"):
        load_model(f"{model_file}:fixed", batch=3)
    with pytest.raises(GraphBuildError, match=r"needs arguments \(batch, without a default\)"):
        load_model(f"{model_file}:batch_without_default")
    assert rebuildable_batch("two-tower", "tiny") == 64 and load_model("two-tower", "tiny", batch=8).name
