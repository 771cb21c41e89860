"""`placer dashboard runs/` as a user sees it in headless Chromium: the Step time tab first, every run side by side,
named by model, target and start, each series of a run against 8 heuristics in its own colour on a millisecond
axis, the simulated phase marked; TensorBoard's own pages beside it; served on loopback only.

Chromium and its WebDriver come from Debian (`apt-get install chromium chromium-driver`); without them the browser
test is skipped, except under CI (CI set), where .ci/run installs them and a missing browser is a failure.
"""

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

# Best step time per update, in seconds: falling, with steps of different sizes, so that the drawn line's shape
# can be compared with the data. The first two updates are simulated, the others measured.
BEST_STEP_TIMES = [4.0e-3, 3.0e-3, 2.5e-3, 1.0e-3]
SAMPLED_STEP_TIMES = [6.0e-3, 3.5e-3, 5.0e-3, 1.5e-3]  # not an affine map of the best: its line cannot pass for it
SIMULATED_UPDATES = 2
BASELINES = {"single-device": 5.0e-3, "round-robin": 4.5e-3, "expert": 2.0e-3, "metis": 1.9e-3, "scotch": 2.1e-3,
             "m-topo": 2.2e-3, "m-etf": 2.3e-3, "m-sct": 2.4e-3}
WRITTEN_RUN = "nmt-2 local:2 2026-11-27 14:05"
OLD_RUN = "old-model/20250101-000000"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    # Without these, Chromium waits on background connections that this network refuses.
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # No WebGL: TensorBoard then draws its charts as SVG, so the plotted line is in the DOM.
    "--disable-3d-apis",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, simulated_run) -> Path:
    """A folder of three runs: one of `placer train` against every heuristic (8), one whose event files the
    tracker wrote directly (a simulated phase, then measured updates), and one written before each series had
    its own run (step times as tags, in seconds)."""
    from agents.tracking import TensorBoardTracker

    folder = tmp_path_factory.mktemp("runs")
    shutil.copytree(simulated_run, folder / simulated_run.parent.name / simulated_run.name)
    written = folder / "nmt-2" / "20261127-140512"
    tracker = TensorBoardTracker(written, {"model": "nmt-2", "agent": "hierarchical"}, run_name=WRITTEN_RUN,
                                 baselines=BASELINES)
    for update, (best, sampled) in enumerate(zip(BEST_STEP_TIMES, SAMPLED_STEP_TIMES), start=1):
        tracker.log_update(update, {"step_time_best": best, "step_time_sampled": sampled, "reward_mean": -best,
                                    "entropy": 1.0 / update, "loss": best,
                                    "simulated": float(update <= SIMULATED_UPDATES)})
    tracker.finish({}, None, None)
    _write_old_run(folder / OLD_RUN / "tensorboard")
    return folder


def _write_old_run(directory: Path) -> None:
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(directory))
    for update, best in enumerate(BEST_STEP_TIMES, start=1):
        with writer.as_default(step=update):
            tf.summary.scalar("step_time/best", best)
            tf.summary.scalar("step_time/baseline/expert", BASELINES["expert"])
    writer.close()


@pytest.fixture(scope="module")
def dashboard(runs, tmp_path_factory):
    """`placer dashboard runs/ --port 0` in its own process group; yields (url, pid) once it serves the curves."""
    log = tmp_path_factory.mktemp("dashboard") / "output.txt"
    server = _start([sys.executable, "-m", "placer.cli", "dashboard", str(runs), "--port", "0"], log)
    try:
        url = _wait_for_output(server, log, r"at (http://\S+/) ")  # "TensorBoard for RUNS at http://127.0.0.1:P/"
        _wait_for_runs(url)
        yield url, server.pid
    finally:
        _stop(server, signal.SIGTERM)  # the server and TensorBoard's data server, nothing else


def _start(command: list[str], log: Path) -> subprocess.Popen:
    """A process in a new process group (so that it can be ended with all it starts), its output going to a file."""
    with log.open("w") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_output(process: subprocess.Popen, log: Path, pattern: str, timeout: float = 60.0) -> str:
    """The first group of the pattern once the process has printed it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text())
        if found:
            return found.group(1)
        if process.poll() is not None:
            pytest.fail(f"{process.args[:4]} exited with {process.returncode}:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    pytest.fail(f"{process.args[:4]} did not print {pattern!r} within {timeout:.0f} s:\n{log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    process.wait(timeout=20)


def _wait_for_runs(url: str, timeout: float = 60.0) -> list[dict]:
    """TensorBoard reads event files in the background: wait until the Step time tab's data holds every series of
    the three runs."""
    deadline, runs = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        try:
            runs = _step_time_runs(url)
        except (urllib.error.URLError, ConnectionError):
            pass
        loaded = {run["name"]: (len(run["series"]), len(run["series"][0]["points"])) for run in runs}
        # the written run: the measured best (first), the simulated best, the sampled median and every baseline
        if len(loaded) == 3 and loaded.get(WRITTEN_RUN) == (3 + len(BASELINES), len(BEST_STEP_TIMES) - SIMULATED_UPDATES) and \
                min(series for series, _ in loaded.values()) >= 2 and max(series for series, _ in loaded.values()) >= 10:
            return runs
        time.sleep(0.5)
    pytest.fail(f"TensorBoard at {url} did not load every run within {timeout:.0f} s: {runs}")


def _step_time_runs(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "data/plugin/step_time/runs", timeout=10) as response:
        return json.load(response)["runs"]


class _Browser:
    """Headless Chromium driven through Debian's chromedriver in W3C WebDriver (JSON over HTTP on loopback).

    A dumped DOM (`chromium --dump-dom`) is taken before TensorBoard has drawn its charts about one time in four,
    so the test polls the live page instead; the protocol needs four calls, so no client library is used.
    """

    def __init__(self, chromium: str, chromedriver: str, profile: Path):
        log = profile.parent / "chromedriver.txt"
        self.driver = _start([chromedriver, "--port=0"], log)
        try:
            port = _wait_for_output(self.driver, log, r"started successfully on port (\d+)")
            self.endpoint = f"http://127.0.0.1:{port}"
            args = [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,1024"]
            options = {"binary": chromium, "args": args}
            session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}})
            self.session = f"/session/{session['sessionId']}"
        except BaseException:
            _stop(self.driver, signal.SIGKILL)
            raise

    def _call(self, method: str, path: str, body: dict | None = None):
        request = urllib.request.Request(self.endpoint + path, method=method, data=json.dumps(body or {}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["value"]

    def open(self, url: str) -> None:
        self._call("POST", self.session + "/url", {"url": url})

    def wait_for(self, script: str, timeout: float = 30.0):
        """Run the script (a function body) until it returns something truthy, and return that."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self._call("POST", self.session + "/execute/sync", {"script": script, "args": []})
            if value:
                return value
            time.sleep(0.25)
        text = self._call("POST", self.session + "/execute/sync",
                          {"script": "return document.body.innerText", "args": []})
        pytest.fail(f"the page did not show it within {timeout:.0f} s; it shows:\n{text[-3000:]}")

    def close(self) -> None:
        try:
            self._call("DELETE", self.session)
        finally:
            _stop(self.driver, signal.SIGKILL)  # chromedriver and any Chromium process left behind


@pytest.fixture
def browser(tmp_path):
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        reason = "headless Chromium is not installed (Debian: apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; .ci/run must install it")
        pytest.skip(reason)
    browser = _Browser(chromium, chromedriver, tmp_path / "chromium-profile")
    yield browser
    browser.close()


def _points(path_d: str) -> list[tuple[float, float]]:
    """(x, y) vertices of an SVG polyline path "Mx,yLx,yLx,y"."""
    return [(float(x), float(y)) for x, y in re.findall(r"[ML]\s*(-?[\d.e+-]+)[ ,](-?[\d.e+-]+)", path_d)]


# What a person reads off each run's chart on the Step time tab: its name, the axis label and tick values, and
# each series' colour, drawn line and legend entry.
STEP_TIME_PANELS = """
    const panels = [...document.querySelectorAll("section.run")].map(panel => ({
        name: panel.querySelector(".run-name").textContent,
        axis: panel.querySelector(".y-label").textContent,
        ticks: [...panel.querySelectorAll(".y-tick")].map(t => parseFloat(t.textContent)),
        series: [...panel.querySelectorAll("path.series")].map(p => ({
            name: p.dataset.series, colour: getComputedStyle(p).stroke, d: p.getAttribute("d")})),
        legend: [...panel.querySelectorAll(".legend-entry")].map(e => ({
            name: e.dataset.series, text: e.textContent.trim(),
            colour: getComputedStyle(e.querySelector(".swatch")).stroke})),
        phase_switch: [...panel.querySelectorAll(".phase-switch line")].map(l => parseFloat(l.getAttribute("x1"))),
        phase_labels: [...panel.querySelectorAll(".phase-switch text")].map(t => t.textContent),
    }));
    return panels.length === 3 ? panels : null;
"""


def _step_time_page(url: str, browser) -> dict[str, dict]:
    """The Step time tab as TensorBoard frames it (its plugin entry page), per run name."""
    browser.open(url + "data/plugin_entry.html?name=step_time")
    return {panel["name"]: panel for panel in browser.wait_for(STEP_TIME_PANELS)}


def test_step_time_is_the_first_tab(dashboard):
    url, _ = dashboard
    with urllib.request.urlopen(url + "data/plugins_listing", timeout=10) as response:
        tabs = list(json.load(response))
    assert tabs[0] == "step_time", tabs


def test_a_run_against_8_heuristics_draws_every_series_in_its_own_colour_on_a_millisecond_axis(
        dashboard, browser, simulated_run):
    from agents.run_files import load_run_config, read_baselines

    url, _ = dashboard
    config = load_run_config(simulated_run)
    heuristics = read_baselines(simulated_run)
    assert len(heuristics) >= 8, heuristics
    panels = _step_time_page(url, browser)
    (name,) = [name for name in panels if name.startswith(f"{config.model} {config.target} ")]
    panel = panels[name]

    colours = [series["colour"] for series in panel["series"]]
    assert len(set(colours)) == len(colours) >= 2 + len(heuristics), panel["series"]
    # the legend names each series in the colour of its line, with its last step time in ms
    assert {(e["name"], e["colour"]) for e in panel["legend"]} == {(s["name"], s["colour"]) for s in panel["series"]}
    assert {e["name"] for e in panel["legend"]} >= {f"baseline/{name}" for name in heuristics} | {"best", "sampled"}
    assert all(e["text"].endswith(" ms") for e in panel["legend"]), panel["legend"]
    # the axis is in milliseconds: its ticks span the series' step times in ms, not in seconds
    assert panel["axis"] == "step time (ms)"
    step_times_ms = [1e3 * timing.step_time for timing in heuristics.values()]
    assert min(panel["ticks"]) <= min(step_times_ms) and max(step_times_ms) <= max(panel["ticks"]) < \
        10 * max(step_times_ms), (panel["ticks"], step_times_ms)


def test_best_so_far_is_drawn_unsmoothed_and_the_switch_to_measured_updates_is_marked(dashboard, browser):
    url, _ = dashboard
    panel = _step_time_page(url, browser)[WRITTEN_RUN]

    # the simulator phase's best and the measured best are two lines, neither rising, one after the other
    (simulated,) = [_points(s["d"]) for s in panel["series"] if s["name"] == "best_simulated"]
    (measured,) = [_points(s["d"]) for s in panel["series"] if s["name"] == "best"]
    assert len(simulated) == SIMULATED_UPDATES and len(measured) == len(BEST_STEP_TIMES) - SIMULATED_UPDATES
    xs, ys = zip(*simulated, *measured)
    assert all(a < b for a, b in zip(xs, xs[1:]))
    # screen y is an affine map of the logged value (no smoothing): each drop is drawn to scale
    assert _affine_fit(list(ys), BEST_STEP_TIMES) is not None, (ys, BEST_STEP_TIMES)
    (switch,) = panel["phase_switch"]
    assert xs[SIMULATED_UPDATES - 1] < switch < xs[SIMULATED_UPDATES], (switch, xs)
    assert panel["phase_labels"] == ["← simulated", "measured →"]


def test_runs_side_by_side_include_one_written_before_series_had_runs_of_their_own(dashboard, browser):
    url, _ = dashboard
    panels = _step_time_page(url, browser)
    assert WRITTEN_RUN in panels and OLD_RUN in panels, list(panels)
    old = panels[OLD_RUN]
    assert [e["name"] for e in old["legend"]] == ["best", "baseline/expert"]
    assert old["legend"][0]["text"] == "best so far 1.00 ms", old["legend"]  # logged in seconds: 1.0e-3


def _affine_fit(ys: list[float], values: list[float]) -> tuple[float, float] | None:
    """(offset, scale) with y = offset + scale * value for every pair, if the points are drawn to scale."""
    scale = (ys[-1] - ys[0]) / (values[-1] - values[0])
    offset = ys[0] - scale * values[0]
    fits = all(abs(offset + scale * value - y) < 1e-3 * abs(scale) * max(values) for y, value in zip(ys, values))
    return (offset, scale) if fits else None


def test_time_series_page_opens_on_step_time(dashboard, browser):
    url, _ = dashboard
    browser.open(url + "#timeseries")
    groups = browser.wait_for("""
        const titles = [...document.querySelectorAll(".group-title")].map(e => e.textContent.trim());
        return titles.includes("update") ? titles : null;
    """)
    # TensorBoard opens the first two sections: step time (and an older run's step_time, in seconds), then the best
    # placement; the agent's internals last.
    assert [g for g in groups if g != "Pinned"][:2] == ["step_time", "step_time_ms"] and groups[-1] == "update", \
        groups


# Every card of the custom-scalars page (in TensorBoard's shadow DOMs): its title, the tags its chart matched, and
# the SVG polylines it draws.
CUSTOM_SCALAR_CARDS = """
    const deep = (root, selector) => {
        const found = [...root.querySelectorAll(selector)];
        for (const element of root.querySelectorAll("*")) {
            if (element.shadowRoot) found.push(...deep(element.shadowRoot, selector));
        }
        return found;
    };
    const cards = deep(document, "tf-custom-scalar-multi-line-chart-card").map(card => ({
        title: deep(card.shadowRoot, ".heading-label").map(e => e.textContent.trim())[0],
        matches: deep(card.shadowRoot, ".match-list-entry").map(e => e.textContent.trim()),
        lines: deep(card.shadowRoot, "path.line").map(p => p.getAttribute("d")).filter(d => d && d.includes("L")),
    }));
    return cards.length && cards[0].lines.length >= 10 ? cards : null;
"""


def test_custom_scalars_first_chart_draws_every_series_of_every_run(dashboard, browser):
    from agents.tracking import STEP_TIME_CHART

    url, _ = dashboard
    browser.open(url + "#custom_scalars")
    first, *others = browser.wait_for(CUSTOM_SCALAR_CARDS)

    assert first["title"] == STEP_TIME_CHART and others, [card["title"] for card in (first, *others)]
    # each series is a run of its own, so TensorBoard gives it its own line (and colour)
    assert any(f"nmt-2/20261127-140512/tensorboard/step_time/baseline/{name}" in " ".join(first["matches"])
               for name in BASELINES), first["matches"]


def test_dashboard_listens_on_loopback_only(dashboard):
    url, pid = dashboard
    port = int(re.search(r":(\d+)/$", url).group(1))
    listening = _listening_addresses(_process_tree(pid))
    assert ("127.0.0.1", port) in listening
    # Every socket the dashboard listens on (TensorBoard and its data server) is on loopback.
    assert all(address in ("127.0.0.1", "::1") for address, _ in listening), listening


def _process_tree(root: int) -> set[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, grew = {root}, True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return tree


def _listening_addresses(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state owned by one of the processes, from /proc."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: TCP_LISTEN
                address, port = local.split(":")
                listening.add((_address(address), int(port, 16)))
    return listening


def _address(hex_address: str) -> str:
    """/proc/net/tcp{,6} print addresses as 32-bit words in host byte order."""
    words = [bytes.fromhex(hex_address[i:i + 8]) for i in range(0, len(hex_address), 8)]
    raw = b"".join(word[::-1] if sys.byteorder == "little" else word for word in words)
    return str(ipaddress.ip_address(raw))
