"""Turn a model spec into the training step's `OpGraph`: a built-in model name, `package.module:function`,
`path/to/file.py:function` (returning an OpGraph or a compiled `keras.Model`), or an `OpGraph` or compiled
`keras.Model` already built. Every way this can fail is one GraphBuildError.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from placer.errors import GraphBuildError, PlacerError
from placer.models.registry import MODELS, build_model, model_names, require_size

if TYPE_CHECKING:  # building graphs needs TensorFlow; checking a spec must not
    from placer.graph.opgraph import OpGraph

SPEC_FORMS = ("`package.module:function` or `path/to/file.py:function` (a function returning an OpGraph or a "
              "compiled keras.Model)")

MODEL_HELP = ("a built-in model (`placer models`), or module:function / file.py:function returning an OpGraph or a "
              "compiled keras.Model")
"""What a MODEL argument accepts, in every command's help: what `load_model` takes from the command line."""

_FILE_MODULE_PREFIX = "placer_model_file_"


def is_builtin_model(spec: Any) -> bool:
    """True for the name of a built-in model (`placer models`), False for anything else."""
    return isinstance(spec, str) and spec in MODELS


def check_model_spec(spec: str | OpGraph | Any, size: str | None = None) -> None:
    """Refuse a spec that cannot name a model, without importing or building anything.

    Checks what is cheap: a name that is no built-in model and no `module:function`, a model file that
    does not exist, a `module:function` whose parts are not Python names, and (if given) a size that a
    built-in model does not have. A spec that passes may still fail in `load_model` (the module does not
    import, the function raises)."""
    if not isinstance(spec, str):
        from placer.graph.keras_model import is_keras_model

        if not is_keras_model(spec):  # a Keras model is checked when its step is derived: that builds it
            _require_op_graph(spec)
    elif is_builtin_model(spec):
        if size is not None:
            require_size(spec, size)
    else:
        _split(spec)


def absolute_model_spec(spec: str) -> str:
    """`spec` with a model file's path made absolute, so that a run started here can be resumed, exported
    and applied from any directory; built-in names and `module:function` are returned as they are."""
    if not isinstance(spec, str) or is_builtin_model(spec):
        return spec
    _, function_name, path = _split(spec)
    return spec if path is None else f"{path.resolve()}:{function_name}"


def load_model(spec: str | OpGraph | Any, size: str = "tiny", batch: int | None = None) -> OpGraph:
    """The training-step graph that `spec` names: a built-in model at `size`, or what a model function returns.

    A model function is called with `size=size` if it has a parameter named `size`, else with no arguments, and
    with `batch=batch` where a batch is asked for and it has a parameter named `batch`. `batch`: the step at
    another batch, where the spec can be built at one (`rebuildable_batch`); refused where it cannot.
    An OpGraph is returned as it is. A compiled `keras.Model` (Keras 3 or tf-keras) becomes its own
    `train_step` on a synthetic batch of its input shapes (`placer.graph.graph_from_keras_model`: 32 examples,
    or the batch its inputs fix). Keras's layer-name counters start from zero for each model function, so a
    spec builds the same op names (and fingerprint) in every call and process. A model file is executed once
    per process, as a module of its own (keyed by its resolved path, so two files with the same name do not
    clash)."""
    return _load(spec, size, batch)[0]


def rebuildable_batch(spec: str | OpGraph | Any, size: str = "tiny") -> int | None:
    """The batch of the step `spec` names at `size`, where `load_model(spec, size, batch=...)` can build it at
    another batch (data parallelism runs each replica on a slice of it); None where it cannot.

    It can for a built-in model that has a batch (`placer models`); a model function with a parameter named
    `batch` (its default is the batch: a whole number); a model function returning a Keras model whose inputs
    fix no batch (traced at 32 examples, as `fit` batches; built at another batch by tracing it there). Not for a
    model function returning an OpGraph without a `batch` parameter, nor a Keras model whose inputs fix the batch
    (`keras.Input(batch_size=...)`: give its function a `batch` parameter that sets it), nor an OpGraph or
    keras.Model given as an object. A model function returning a Keras model is built once to find out."""
    from placer.models.registry import model_batch, model_spec

    if not isinstance(spec, str):
        return None
    if is_builtin_model(spec):
        require_size(spec, size)
        return model_batch(spec, size) if model_spec(spec).batch_of is not None else None
    default = _batch_default(_builder(spec), spec)
    if default is not None:
        return default
    key = (absolute_model_spec(spec), size)
    if key not in _TRACED_BATCHES:
        _load(spec, size)
    traced = _TRACED_BATCHES.get(key)
    return traced.size if traced is not None and traced.chosen_by == "default" else None


def require_rebuildable_batch(spec: str | OpGraph | Any, size: str = "tiny") -> int:
    """`rebuildable_batch`, refused in one message where there is none: what a spec needs to be built at a slice of
    its batch."""
    from placer.models.registry import model_batch

    batch = rebuildable_batch(spec, size)
    if batch is not None:
        return batch
    if is_builtin_model(spec):
        model_batch(spec, size)  # says which built-in models can
    name = spec if isinstance(spec, str) else "given as an object"
    raise GraphBuildError(
        f"model {name!r} cannot be built at another batch (replicas and micro-batches run the step at a slice of "
        "it): give its model function a `batch` parameter with the step's batch as default (def model(batch=32): "
        "...), or return a Keras model whose inputs fix no batch")


_TRACED_BATCHES: dict[tuple[str, str], Any] = {}
"""(resolved spec, size) -> the `TracedBatch` of the Keras model its function returned at its own batch (None: an
OpGraph): whether it can be traced at another batch, without building it twice."""


def load_keras_model(spec: str, size: str = "tiny") -> tuple[Any, OpGraph]:
    """The compiled `keras.Model` a model function returns, built as `load_model` builds it (layer names counted
    from zero), and its training-step graph; GraphBuildError if the spec does not name a Keras model."""
    graph, model = _load(spec, size)
    if model is None:
        raise GraphBuildError(f"model {spec!r} is not a Keras model: its model function returns an OpGraph, or it "
                              "is a built-in model. Layer placements are for model functions returning a keras.Model")
    return model, graph


def _load(spec: str | OpGraph | Any, size: str, batch: int | None = None) -> tuple[OpGraph, Any]:
    """The graph `spec` names (at `batch`, if given), and the Keras model it was derived from (None when the spec
    gave no Keras model)."""
    from placer.graph.keras_model import is_keras_model, keras_names_from_zero
    from placer.graph.opgraph import OpGraph

    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise GraphBuildError(f"batch must be a positive whole number, got {batch!r}")
    if not isinstance(spec, str):
        if batch is not None:
            raise GraphBuildError("a model given as an object cannot be built at another batch: give a model "
                                  "function (module:function or file.py:function) that can (placer.models."
                                  "rebuildable_batch)")
        return _require_op_graph(spec), spec if is_keras_model(spec) else None
    if is_builtin_model(spec):
        return build_model(spec, size, batch), None
    builder = _builder(spec)
    function_name = spec.rpartition(":")[2]
    default = _batch_default(builder, spec) if batch is None else None
    takes_batch = "batch" in _parameters(builder)
    keras_model = None
    with keras_names_from_zero():
        graph = _call(builder, size, spec, batch if takes_batch else None)
        if is_keras_model(graph):
            keras_model = graph
            # A function's `batch` is the step's batch, also where the Keras model's inputs leave it open.
            graph = _keras_model_step(graph, f"model function {spec!r} returned a Keras model, but",
                                      name=function_name, batch_size=batch or default)
    if not isinstance(graph, OpGraph):
        raise GraphBuildError(
            f"model function {spec!r} returned {_describe_value(graph)}, not an OpGraph or a keras.Model. Return "
            "a compiled keras.Model, or the training step built with a placer.graph builder: graph_from_keras (a "
            "tf-keras model, loss and optimizer), graph_from_function (a function adding the step to a tf.Graph), "
            "graph_from_tf_function (a TF2 step) or graph_from_keras_model (a compiled model at another batch)"
        )
    if batch is None:
        _TRACED_BATCHES[(absolute_model_spec(spec), size)] = graph.batch if keras_model is not None else None
    elif not takes_batch and keras_model is None:
        raise GraphBuildError(f"model function {spec!r} returns an OpGraph and has no `batch` parameter, so it cannot "
                              f"be built at batch {batch}: give it one (def {function_name}(batch=32): ...)")
    return graph, keras_model


def _builder(spec: str) -> Callable[..., Any]:
    """The model function `spec` names (its module loaded once per process)."""
    where, function_name, path = _split(spec)
    module = _module_from_file(path, spec) if path is not None else _import_module(where, spec)
    return _function_of(module, where, function_name, spec)


def _batch_default(builder: Callable[..., Any], spec: str) -> int | None:
    """The default of the model function's `batch` parameter (the batch of its step), None where it has none."""
    parameter = _parameters(builder).get("batch")
    if parameter is None or parameter.default is parameter.empty:  # no default: refused where it is called
        return None
    if not isinstance(parameter.default, int) or isinstance(parameter.default, bool) or parameter.default < 1:
        raise GraphBuildError(f"model function {spec!r} has a `batch` parameter whose default is "
                              f"{parameter.default!r}: give it the batch of the step, a positive whole number "
                              "(def model(batch=32): ...)")
    return parameter.default


def _parameters(builder: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(builder).parameters
    except (TypeError, ValueError):  # some callables (C functions) have no signature: call them plainly
        return {}


def _require_op_graph(spec: Any) -> OpGraph:
    from placer.graph.keras_model import is_keras_model
    from placer.graph.opgraph import OpGraph

    if is_keras_model(spec):
        return _keras_model_step(spec, "the Keras model given as the model cannot be placed:")
    if not isinstance(spec, OpGraph):
        raise GraphBuildError(
            f"a model is a built-in model's name, {SPEC_FORMS}, an OpGraph or a compiled keras.Model; got "
            f"{_describe_value(spec)}"
        )
    return spec


def _keras_model_step(model: Any, context: str, name: str | None = None, batch_size: int | None = None) -> OpGraph:
    """The model's training step (at `batch_size` examples, if given), its graph named `name` (a model function's
    name), else after the model."""
    from placer.graph.keras_model import graph_from_keras_model

    try:
        return graph_from_keras_model(model, name=name, batch_size=batch_size)
    except PlacerError as error:  # says what the model lacks
        raise GraphBuildError(f"{context} {error}") from error
    except Exception as error:  # the model's own train_step failed while tracing
        raise GraphBuildError(
            f"{context} its train_step failed on a synthetic batch: {_one_line(error)}. Check that "
            "model.train_on_batch runs on a batch of its input shapes, or return "
            "placer.graph.graph_from_keras_model(model, inputs=..., targets=...) with SyntheticTensors that fit"
        ) from error


# -- the spec --------------------------------------------------------------------------------------------


def _split(spec: str) -> tuple[str, str, Path | None]:
    """(module or file as written, function name, the file's path or None for a module); checks the form."""
    where, colon, function_name = spec.rpartition(":")
    if not colon or not where:
        raise GraphBuildError(_unknown_name_message(spec))
    if not function_name.isidentifier():
        raise GraphBuildError(
            f"{spec!r} names no function after the colon ({function_name!r} is not a Python name): give "
            f"{SPEC_FORMS}"
        )
    if where.endswith(".py"):
        path = Path(where)
        if not path.exists():
            raise GraphBuildError(
                f"model file {where} does not exist (looked in {path.resolve().parent}): give the path of a .py "
                "file, absolute or relative to the current directory, then :function"
            )
        if not path.is_file():
            raise GraphBuildError(f"model file {where} is a directory, not a .py file: give the file's path, then :function")
        return where, function_name, path
    if "/" in where or "\\" in where:
        raise GraphBuildError(
            f"{where!r} in {spec!r} looks like a path but does not end in .py: give `path/to/file.py:function`, "
            "or `package.module:function` for a module on the Python path"
        )
    if not all(part.isidentifier() for part in where.split(".")):
        raise GraphBuildError(
            f"{where!r} in {spec!r} is not a module name (dotted Python names, e.g. my_models.vision): give {SPEC_FORMS}"
        )
    return where, function_name, None


def _unknown_name_message(spec: str) -> str:
    close = difflib.get_close_matches(spec, list(MODELS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"{spec!r} is not a built-in model ({hint}the built-in models are {', '.join(model_names())} (see `placer "
            f"models`). For your own model give {SPEC_FORMS}")


# -- the module and its function -------------------------------------------------------------------------


def _module_from_file(path: Path, spec: str) -> ModuleType:
    resolved = path.resolve()
    # keyed by the full path: two experiments' `model.py` must not share (or overwrite) one module
    name = _FILE_MODULE_PREFIX + hashlib.sha1(str(resolved).encode()).hexdigest()[:12] + "_" + _python_name(path.stem)
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, resolved)
    if loader_spec is None or loader_spec.loader is None:
        raise GraphBuildError(f"model file {path} cannot be loaded as a Python module: give a .py file, then :function")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # before executing, as import does: dataclasses and pickling look the module up
    try:
        loader_spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:  # SystemExit: a script that parses its own arguments on import
        sys.modules.pop(name, None)
        raise GraphBuildError(
            f"model file {path} failed while loading, before {spec.rpartition(':')[2]!r} was called: "
            f"{_one_line(error)}. Fix the file (run `python {path}` to see the traceback)"
        ) from error
    return module


def _import_module(module_name: str, spec: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except (Exception, SystemExit) as error:
        raise GraphBuildError(
            f"cannot import module {module_name!r} for model {spec!r}: {_one_line(error)}. Check that it is on the "
            "Python path (PYTHONPATH, or installed) and imports without errors"
        ) from error


def _function_of(module: ModuleType, where: str, function_name: str, spec: str) -> Callable[..., Any]:
    builder = getattr(module, function_name, None)
    if builder is None:
        defined = sorted(name for name, value in vars(module).items()
                         if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_"))
        listing = f"it defines {', '.join(defined)}" if defined else "it defines no functions"
        raise GraphBuildError(f"{where} has no function {function_name!r} ({listing}): give {where}:FUNCTION")
    if not callable(builder):
        raise GraphBuildError(
            f"{function_name!r} in {where} is a {type(builder).__name__}, not a function: name a function that "
            "returns the OpGraph"
        )
    return builder


def _call(builder: Callable[..., Any], size: str, spec: str, batch: int | None = None) -> Any:
    """`builder` called with `size` if it takes one, and `batch` (given: it takes one) by name."""
    parameters = _parameters(builder)
    size_parameter = parameters.get("size")
    required = [name for name, p in parameters.items() if name not in ("size", "batch") and p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    batch_parameter = parameters.get("batch")
    if batch_parameter is not None and batch_parameter.default is batch_parameter.empty:
        required.append("batch, without a default")
    if required:
        raise GraphBuildError(
            f"model function {spec!r} needs arguments ({', '.join(required)}): a model function takes none, or only "
            "`size` and `batch` (with a default: the batch of its step). Wrap it in one that builds your model with "
            "fixed arguments"
        )
    extra = {} if batch is None else {"batch": batch}
    try:
        if size_parameter is None:
            return builder(**extra)
        if size_parameter.kind is size_parameter.POSITIONAL_ONLY:
            return builder(size, **extra)
        return builder(size=size, **extra)
    except PlacerError as error:  # already says what was wrong (e.g. a placer.graph builder refused the step)
        raise GraphBuildError(f"model function {spec!r} failed: {error}") from error
    except Exception as error:
        raise GraphBuildError(
            f"model function {spec!r} raised {_one_line(error)}. Fix the function (call it directly to see the "
            "traceback)"
        ) from error


# -- messages --------------------------------------------------------------------------------------------


def _one_line(error: BaseException) -> str:
    """The exception's type and its message's first line: TensorFlow's messages go on for pages."""
    if isinstance(error, SyntaxError) and error.lineno is not None:  # its str() repeats the file's full path
        where = f"{Path(error.filename).name}, " if error.filename else ""
        return f"{type(error).__name__}: {error.msg} ({where}line {error.lineno})"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _describe_value(value: Any) -> str:
    if value is None:
        return "None"
    text = repr(value)
    return f"a {type(value).__name__} ({text[:80] + '...' if len(text) > 80 else text})"


def _python_name(stem: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in stem)
