"""A plan: how the machine runs one training step (one process, or testbed workers with their cores and thread
pools, or a modeled GPU machine), its replicas (data parallelism: how many, each on its slice of the batch, or
none), where one replica's ops run (a placement) and its micro-batch schedule (or none); THE plan file's reader
and writer.

A plan names the graph and the target it was made for; `read_plan_file` refuses one that does not fit this
machine, and `Plan.check_graph` / `Plan.check_target` refuse one made for another graph, target or calibration,
each saying what to re-run, before anything is built or started (`placer apply PLAN.json` runs it).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Union

from placer.cost.record import StepTime
from placer.cost.spec import MODELED
from placer.devices import short_name
from placer.errors import DeviceSpecError, PlacementFileError, PlanFileError, ReplicaError, ScheduleError
from placer.files import write_json
from placer.measure.targets import InProcess, LocalTestbed, parse_target
from placer.placement import Placement, PlacementFile, check_same_graph, placement_file_from_json_dict
from placer.replicas import Replicas
from placer.schedule.origin import PlanOrigin, check_plan_fits, plan_origin, with_origin
from placer.schedule.plan import SchedulePlan
from placer.schedule.plan import plan_from_json_dict as schedule_from_json_dict

if TYPE_CHECKING:
    from placer.cost.spec import TargetSpec
    from placer.graph.opgraph import OpGraph

FILE_FORMAT = "placer.plan"
FILE_FORMAT_VERSION = 1



@dataclass(frozen=True)
class ModeledMachine:
    """A modeled GPU machine ("modeled:4xH100"): a plan made for it was priced by the simulator alone, and this
    machine cannot run it (`Plan.check_target` refuses it)."""

    spec: str

    def __post_init__(self):
        from placer.cost.spec import parse_target_spec

        if not MODELED.fullmatch(self.spec):
            raise DeviceSpecError(f"{self.spec!r} is not a modeled machine such as 'modeled:4xH100'")
        parse_target_spec(self.spec)  # refuses a GPU or link placer does not model

    @property
    def device_names(self) -> tuple[str, ...]:
        from placer.cost.spec import parse_target_spec

        return tuple(device.name for device in parse_target_spec(self.spec).devices.devices)

    def __str__(self) -> str:
        return self.spec


MachineUse = Union[InProcess, LocalTestbed, ModeledMachine]
"""How the machine runs the step: one process whose logical CPU devices share its thread pools (`InProcess`), or
testbed workers, each pinned to cores of its own with its own pools (`LocalTestbed`). Either is checked against
this machine's cores when it is made, so a plan that exists fits here. Or a modeled GPU machine (`ModeledMachine`),
which only the simulator runs: such a plan is read, described and compared, never applied here."""

_HOW_TO_MAKE = ("`placer schedule MODEL --placement PLACEMENT --target TARGET --micro-batches M --method METHOD "
                "--save-plan PLAN`")


@dataclass(frozen=True)
class Plan:
    """One way to run a model's training step on a machine, and what it was made for and predicted to take."""

    model: str
    """The model spec (a built-in model, or module:function / file.py:function) and its size."""
    size: str
    graph_name: str
    fingerprint: str
    """Of the training-step graph its placement places: the model's at its full batch, or with replicas the
    model's built at one replica's slice of the batch."""
    target: str
    """The target spec it was made for: a real one (inprocess:2, local:widths=2+1), calibrated:FILE, the
    simulated twin of the real one that `machine` runs, or a modeled machine (modeled:4xH100, simulated only)."""
    machine: MachineUse
    placement: PlacementFile
    schedule: SchedulePlan | None = None
    """The order of the step's micro-batches on each device; None: one batch, no micro-batches."""
    calibration: str | None = None
    """The calibration file a calibrated:FILE target read, and `calibration_digest` of it then."""
    calibration_digest: str | None = None
    predicted: StepTime | None = None
    """The step time predicted when the plan was made (with a schedule: its makespan)."""
    replicas: Replicas | None = None
    """Data parallelism: `replicas.degree` copies of the step at `replicas.batch` samples each, every one placed
    as `placement` on its own group of devices (`placer.replicas.replica_devices`); None: one copy, the whole
    batch."""
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """What made it: "made_by" (a command's name) and "command" (the command line that makes it again)."""
    source: str = field(default="the plan", compare=False)
    """Where it was read from (used in error messages)."""

    def __post_init__(self):
        if self.placement.fingerprint != self.fingerprint:
            raise PlanFileError(
                f"{self.source} is for graph {self.graph_name!r} (fingerprint {self.fingerprint[:12]}), but its placement "
                f"places graph {self.placement.graph_name!r} (fingerprint {self.placement.fingerprint[:12]}): "
                f"{self.remake}")
        outside = [name for name in self.placement.devices if not _has_device(self.machine, name)]
        if outside:
            raise PlanFileError(
                f"{self.source}'s placement puts ops on {', '.join(short_name(d) for d in outside)}, which "
                f"{self.run_target} ({describe_machine(self.machine)}) does not have: the placement was made for "
                f"another target; {self.remake}")
        if self.schedule is not None:
            try:
                check_plan_fits(self.schedule, self.placement, f"{self.source}'s schedule")
            except ScheduleError as error:
                raise PlanFileError(f"{error}; {self.remake}") from None

    # -- construction ---------------------------------------------------------------------------------

    @classmethod
    def made_for(cls, model: str, size: str, graph: OpGraph, placement: Placement | PlacementFile,
                 target: str | TargetSpec, *, schedule: SchedulePlan | None = None, predicted: StepTime | None = None,
                 replicas: Replicas | None = None, made_by: str = "", command: str = "") -> Plan:
        """The plan of `graph` (built-in `model` at `size`, or a model function) placed by `placement` on `target`
        (a real one; calibrated:FILE: then the real target it was calibrated on runs the plan; or a modeled
        machine, which nothing here runs), with `schedule`; with `replicas`, `graph` is the step built at one
        replica's slice of the batch and `placement` places one replica on the first group of devices.
        `command` is the command line that makes the plan again, quoted in refusals."""
        from placer.cost.spec import parse_target_spec

        spec = parse_target_spec(target)
        machine = _machine_of(spec)
        placement_file = placement if isinstance(placement, PlacementFile) else placement.to_file(graph)
        placement_file = placement_file.with_metadata(model=model, size=size)
        if schedule is not None and plan_origin(schedule) is None:
            schedule = with_origin(schedule, PlanOrigin.of(model, size, placement_file))
        calibration = spec.calibration_path
        return cls(model, size, graph.name, graph.fingerprint, str(spec), machine, placement_file, schedule,
                   calibration, None if calibration is None else _calibration_digest(calibration), predicted,
                   replicas, {"made_by": made_by, "command": command})

    # -- checks ---------------------------------------------------------------------------------------

    @property
    def remake(self) -> str:
        """What to re-run to make this plan again (for another graph or target: with that model or --target)."""
        return _remake(self.provenance.get("command"))

    def check_model(self, model: str | None, size: str | None) -> None:
        """Refuse another model or size than the plan's, before any graph is built."""
        if (model is not None and model != self.model) or (size is not None and str(size) != self.size):
            raise PlanFileError(
                f"{self.source} was made for {self.model} at size {self.size}, not for {model or self.model} at size "
                f"{size or self.size}: {self.remake}")

    def check_graph(self, graph: OpGraph) -> None:
        """Refuse, saying what differs, a graph other than the one the plan was made for."""
        try:
            check_same_graph(self.placement, graph)
        except PlacementFileError as error:
            raise PlanFileError(f"{error}; {self.remake}") from None

    def check_target(self, target: str | None = None, *, allow_exposed_ports: bool = False) -> MachineUse:
        """What runs the plan: its machine use, if `target` (a spec a user gave, or None) is the target it was made
        for or a calibrated:FILE of the same calibration; refuses another target, another calibration, and a
        calibration redone since the plan was made. Nothing is started."""
        from placer.cost.spec import parse_target_spec

        if isinstance(self.machine, ModeledMachine):
            raise PlanFileError(
                f"{self.source} was made for {self.machine}, a modeled machine: its step time is simulated and this "
                f"machine has no such GPUs to run it; `placer apply` runs plans made for a real target (`placer "
                f"optimize {self.model} --size {self.size} --target local:2` makes one)")
        self._check_calibration_unchanged()
        machine = self.machine
        if isinstance(machine, LocalTestbed):
            machine = dataclasses.replace(machine, allow_exposed_ports=allow_exposed_ports)
        if target is None:
            return machine
        try:
            spec = parse_target_spec(target, allow_exposed_ports=allow_exposed_ports)
        except DeviceSpecError as error:
            raise PlanFileError(f"--target {target}: {error}") from None
        if spec.calibration_path is not None:
            if _calibration_digest(spec.calibration_path) != self.calibration_digest:
                made = (f"with calibration {self.calibration} (as it was then)" if self.calibration
                        else f"on {self.target}, without a calibration")
                raise PlanFileError(f"{self.source} was made {made}, not with {spec.calibration_path}: its placement, "
                                    f"schedule and prediction come from another simulator; {self.remake}")
            return machine
        if spec.backend != "measured":
            raise PlanFileError(f"{target!r} is a modeled machine, which cannot run a plan: give the real target it was "
                                f"made for ({self.run_target}), or leave out --target")
        if not _same_machine(spec.measured, machine):
            raise PlanFileError(
                f"{self.source} was made for {self.run_target}, not for {spec.text}: its placement names that target's "
                f"devices and its pools are that target's. Leave out --target to run it there, or {self.remake}")
        return machine

    @property
    def run_target(self) -> str:
        """The real target that runs the plan, as a spec (inprocess:2, local:widths=1+1,intra=1+1,inter=2+2)."""
        return str(self.machine)

    def _check_calibration_unchanged(self) -> None:
        if self.calibration is None or not Path(self.calibration).is_file():
            return  # the calibration only made the prediction; without it the plan still runs
        if _calibration_digest(self.calibration) != self.calibration_digest:
            raise PlanFileError(f"{self.calibration} was calibrated again since {self.source} was made: its placement, "
                                f"schedule and prediction come from the old calibration; {self.remake}")

    # -- views and the file ---------------------------------------------------------------------------

    def describe(self) -> str:
        lines = [f"plan for {self.model} ({self.size}, graph {self.graph_name!r}), made for {self.target}"
                 + (f" by {self.provenance['made_by']}" if self.provenance.get("made_by") else "")]
        lines.append(f"  machine: {describe_machine(self.machine)}")
        if self.replicas is not None:
            lines.append(f"  replicas: {self.replicas.degree}, {self.replicas.batch} samples each, gradients combined "
                         f"by {self.replicas.gradients}; the placement is one replica's")
        per_device = self.placement.groups_and_ops_per_device()
        lines.append("  placement: " + ", ".join(f"{short_name(device)} {ops} ops" for device, (_, ops) in per_device.items())
                     + (f" ({self.placement.metadata['method']})" if self.placement.metadata.get("method") else ""))
        lines.append("  schedule: none (one batch)" if self.schedule is None else
                     f"  schedule: {self.schedule.method}, {self.schedule.micro_batches} micro-batches")
        if self.predicted is not None and self.predicted.ok:
            lines.append(f"  predicted: {self.predicted.seconds * 1e3:.2f} ms ({self.predicted.backend} on "
                         f"{self.predicted.target or self.target})")
        return "\n".join(lines)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format": FILE_FORMAT, "format_version": FILE_FORMAT_VERSION,
            "model": {"spec": self.model, "size": self.size, "graph": self.graph_name, "fingerprint": self.fingerprint},
            "target": self.target,
            "calibration": None if self.calibration is None else {"path": self.calibration,
                                                                  "digest": self.calibration_digest},
            "machine": _machine_to_json(self.machine),
            "placement": self.placement.to_json_dict(),
            "schedule": None if self.schedule is None else self.schedule.to_json_dict(),
            "replicas": None if self.replicas is None else self.replicas.to_json_dict(),
            "predicted": None if self.predicted is None else self.predicted.to_dict(),
            "provenance": dict(self.provenance),
        }

    def save(self, path: str | Path) -> Path:
        """The one writer of plan files (atomically: a reader never sees half a plan)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_json(path, self.to_json_dict())


def is_plan_file(path: str | Path) -> bool:
    """True if `path` names a plan's format (so a command taking placement files can take plans): a plan file,
    or one broken (not valid JSON) that still says it is one, which the plan reader then explains."""
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except (OSError, ValueError):  # not readable or not text: the placement reader says what is wrong
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return f'"{FILE_FORMAT}"' in text
    return isinstance(data, dict) and data.get("format") == FILE_FORMAT


def read_plan_file(path: str | Path) -> Plan:
    """The one reader of plan files: the format, every part (placement, schedule, machine use, prediction), that
    they belong together, and that this machine has the cores its machine use pins; PlanFileError otherwise."""
    from placer.files import read_json_file

    data = read_json_file(path, "plan file", f"make one with {_HOW_TO_MAKE}", PlanFileError)
    return plan_from_json_dict(data, source=str(path))


def plan_from_json_dict(data: Any, *, source: str = "the plan") -> Plan:
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise PlanFileError(f"{source} is not a placer plan file (no \"format\": \"{FILE_FORMAT}\"): make one with "
                            f"{_HOW_TO_MAKE}")
    if data.get("format_version") != FILE_FORMAT_VERSION:
        raise PlanFileError(f"{source} has plan format version {data.get('format_version')!r}; this placer reads "
                            f"version {FILE_FORMAT_VERSION}: make the plan again with this placer ({_HOW_TO_MAKE})")
    provenance = data.get("provenance") or {}
    model = data.get("model")
    if not isinstance(model, dict) or not all(isinstance(model.get(k), str) and model[k]
                                              for k in ("spec", "size", "fingerprint")):
        raise PlanFileError(f"{source} needs the model it was made for under \"model\": its spec, size and fingerprint")
    if not isinstance(data.get("target"), str) or not isinstance(provenance, dict):
        raise PlanFileError(f"{source} needs the target spec it was made for under \"target\"")
    remake = _remake(provenance.get("command"))
    try:
        placement = placement_file_from_json_dict(data.get("placement"), source=f"{source}'s placement")
    except PlacementFileError as error:
        raise PlanFileError(f"{error}; {remake}") from None
    schedule = None
    if data.get("schedule") is not None:
        try:
            schedule = schedule_from_json_dict(data["schedule"], source=f"{source}'s schedule")
        except ScheduleError as error:
            raise PlanFileError(f"{error}; {remake}") from None
    machine = _machine_from_json(data.get("machine"), source, remake)
    replicas = None
    if data.get("replicas") is not None:
        try:
            replicas = Replicas.from_json_dict(data["replicas"], source=f"{source}'s replicas")
        except ReplicaError as error:
            raise PlanFileError(f"{error}; {remake}") from None
    calibration = data.get("calibration") or {}
    predicted = None
    if data.get("predicted") is not None:
        try:
            predicted = StepTime.from_dict(data["predicted"])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise PlanFileError(f"{source}'s predicted step time is malformed ({error!r}); {remake}") from None
    return Plan(model["spec"], model["size"], str(model.get("graph", "")), model["fingerprint"], data["target"],
                machine, placement, schedule, calibration.get("path"), calibration.get("digest"), predicted,
                replicas, dict(provenance), source)


def _remake(command: str | None) -> str:
    """What to re-run to make a plan again, from the command line that made it when it recorded one."""
    if command:
        return f"make the plan again with `{command}` (with the model, size or --target you want)"
    return f"make a plan for the graph and target you want with {_HOW_TO_MAKE}"


# -- machine use -------------------------------------------------------------------------------------------


def describe_machine(machine: MachineUse) -> str:
    """One line: one process and its pools, each testbed worker's cores and pools, or the modeled machine."""
    if isinstance(machine, ModeledMachine):
        return f"{machine}, a modeled machine (simulated: nothing here runs it)"
    if isinstance(machine, InProcess):
        pools = ", ".join(f"{name} {value if value is not None else 'default'}" for name, value in
                          (("intra", machine.intra_op_threads), ("inter", machine.inter_op_threads)))
        return f"one process, {machine.logical_cpus} logical CPU device(s) sharing its thread pools ({pools})"
    from placer.measure.targets import format_rate

    workers = machine.layout()
    link = f", over a link shaped to {format_rate(machine.link_bits_per_second)}" if machine.link_bits_per_second else ""
    return f"{len(workers)} testbed workers{link}: " + "; ".join(
        f"worker {task} on cores {list(w.cores)}, intra {w.intra_op_threads}, inter {w.inter_op_threads}"
        for task, w in enumerate(workers))


def _machine_of(spec: TargetSpec) -> MachineUse:
    """The real target a plan made for `spec` runs on: the target itself, or the one a calibration was made on."""
    if spec.calibration is not None:
        try:
            return parse_target(spec.calibration.target)
        except DeviceSpecError as error:
            raise PlanFileError(f"{spec.text} was calibrated on {spec.calibration.target!r}, which cannot run here "
                                f"({error}): calibrate this machine (`placer calibrate --target TARGET --out FILE`)") from None
    if isinstance(spec.measured, (InProcess, LocalTestbed)):
        return spec.measured
    if spec.backend == "simulated" and MODELED.fullmatch(spec.text):
        return ModeledMachine(spec.text)
    raise PlanFileError(f"a plan says how to use a machine, so it is made for inprocess:N, local:..., "
                        f"calibrated:FILE or modeled:NxGPU, not for {spec.text}")


def _machine_to_json(machine: MachineUse) -> dict[str, Any]:
    if isinstance(machine, ModeledMachine):
        return {"modeled": machine.spec}
    if isinstance(machine, InProcess):
        return {"process": {"logical_cpus": machine.logical_cpus, "intra_op_threads": machine.intra_op_threads,
                            "inter_op_threads": machine.inter_op_threads}}
    workers = {"workers": [{"cores": list(w.cores), "intra_op_threads": w.intra_op_threads,
                            "inter_op_threads": w.inter_op_threads} for w in machine.layout()]}
    if machine.link_bits_per_second:
        workers["link_bits_per_second"] = machine.link_bits_per_second
    return workers


def _machine_from_json(data: Any, source: str, remake: str) -> MachineUse:
    """The machine use a file records, checked against this machine's cores (InProcess and LocalTestbed refuse
    thread pools or core sets it does not have)."""
    try:
        if isinstance(data, dict) and isinstance(data.get("modeled"), str):
            return ModeledMachine(data["modeled"])
        if isinstance(data, dict) and isinstance(data.get("process"), dict):
            process = data["process"]
            return InProcess(int(process["logical_cpus"]), process.get("intra_op_threads"),
                             process.get("inter_op_threads"))
        if isinstance(data, dict) and isinstance(data.get("workers"), list) and data["workers"]:
            workers = data["workers"]
            return LocalTestbed(len(workers), worker_cores=tuple(tuple(int(c) for c in w["cores"]) for w in workers),
                                intra_op_threads=tuple(int(w["intra_op_threads"]) for w in workers),
                                inter_op_threads=tuple(int(w["inter_op_threads"]) for w in workers),
                                link_bits_per_second=data.get("link_bits_per_second"))
    except (KeyError, TypeError, ValueError) as error:
        raise PlanFileError(f"{source}'s machine use is malformed ({error!r}); {remake}") from None
    except DeviceSpecError as error:
        if isinstance(data, dict) and "modeled" in data:
            raise PlanFileError(f"{source}'s modeled machine: {error}; {remake}") from None
        raise PlanFileError(f"{source} uses more of the machine than this one has: {error}; on this machine, "
                            f"{remake}") from None
    raise PlanFileError(f"{source} needs how it uses the machine under \"machine\": {{\"process\": ...}}, "
                        f"{{\"workers\": [...]}} or {{\"modeled\": \"modeled:NxGPU\"}}; {remake}")


def _same_machine(a: Any, b: MachineUse) -> bool:
    """True if two targets start the same processes: the same devices, cores and thread pools."""
    if isinstance(a, InProcess) and isinstance(b, InProcess):
        return a == b
    if isinstance(a, LocalTestbed) and isinstance(b, LocalTestbed):
        return a.layout() == b.layout() and a.link_bits_per_second == b.link_bits_per_second
    return False


def _has_device(machine: MachineUse, name: str) -> bool:
    """True if `machine` has CPU device `name` (a process's logical CPUs, a worker's one CPU); GPUs are not known
    before TensorFlow lists them, so they pass here and the placement's own check refuses a missing one."""
    from placer.devices import name_parts
    from placer.testbed import JOB

    if isinstance(machine, ModeledMachine):
        return name in machine.device_names
    job, task, kind, index = name_parts(name)
    if kind != "CPU":
        return True
    if isinstance(machine, InProcess):
        return (job, task) == ("localhost", 0) and index < machine.logical_cpus
    return job == JOB and task < machine.workers and index == 0


def _calibration_digest(path: str | Path) -> str | None:
    from placer.calibration import calibration_digest

    return calibration_digest(path) if Path(path).is_file() else None
