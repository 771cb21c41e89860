"""`placer dashboard RUN_DIR` as a user sees it in headless Chromium: step time first, the learned placement's curve
against every baseline in one chart, served on loopback only.

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
# can be compared with the data.
BEST_STEP_TIMES = [4.0e-3, 3.0e-3, 2.5e-3, 1.0e-3]
SAMPLED_STEP_TIMES = [6.0e-3, 3.5e-3, 5.0e-3, 1.5e-3]  # not an affine map of the best: its line cannot pass for it
BASELINES = {"expert": 2.0e-3, "single-device": 5.0e-3}
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    # Without these, Chromium waits on background connections that this network refuses.
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # No WebGL: TensorBoard then draws its charts as SVG, so the plotted line is in the DOM.
    "--disable-3d-apis",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run directory holding only what the dashboard reads: TensorBoard event files as an experiment writes them."""
    from agents.tracking import TensorBoardTracker

    run = tmp_path_factory.mktemp("run")
    tracker = TensorBoardTracker(run, {"model": "two-tower", "agent": "hierarchical"}, run_name="dashboard-test",
                                 baselines=BASELINES)
    for update, (best, sampled) in enumerate(zip(BEST_STEP_TIMES, SAMPLED_STEP_TIMES), start=1):
        tracker.log_update(update, {"step_time_best": best, "step_time_sampled": sampled, "reward_mean": -best,
                                    "entropy": 1.0 / update, "loss": best})
    tracker.finish({}, None, None)
    return run


@pytest.fixture(scope="module")
def dashboard(run_dir, tmp_path_factory):
    """`placer dashboard RUN_DIR --port 0` in its own process group; yields (url, pid) once it serves the curves."""
    log = tmp_path_factory.mktemp("dashboard") / "output.txt"
    server = _start([sys.executable, "-m", "placer.cli", "dashboard", str(run_dir), "--port", "0"], log)
    try:
        url = _wait_for_output(server, log, r"at (http://\S+/) ")  # "TensorBoard for RUN_DIR at http://127.0.0.1:P/"
        _wait_for_tag(url, "step_time/best")
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


def _wait_for_tag(url: str, tag: str, timeout: float = 60.0) -> None:
    """TensorBoard reads event files in the background: wait until its API lists the tag."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "data/plugin/scalars/tags", timeout=5) as response:
                if any(tag in tags for tags in json.load(response).values()):
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.5)
    pytest.fail(f"TensorBoard at {url} did not list {tag} within {timeout:.0f} s")


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


# The SVG polylines TensorBoard draws for the series of the step_time/best card, as their "d" attributes.
BEST_STEP_TIME_LINES = """
    const card = [...document.querySelectorAll("scalar-card")]
        .find(card => card.querySelector('[title="step_time/best"]'));
    const lines = card ? [...card.querySelectorAll("path")].filter(p => p.style.fill === "none" && p.style.stroke) : [];
    return lines.length ? lines.map(p => p.getAttribute("d")) : null;
"""


def _points(path_d: str) -> list[tuple[float, float]]:
    """(x, y) vertices of an SVG polyline path "Mx,yLx,yLx,y"."""
    return [(float(x), float(y)) for x, y in re.findall(r"[ML]\s*(-?[\d.e+-]+)[ ,](-?[\d.e+-]+)", path_d)]


def test_scalars_page_draws_the_best_step_time_curve(dashboard, browser):
    url, _ = dashboard
    # The time-series page, filtered to the one card and unsmoothed, so the drawn line is the logged data.
    browser.open(url + "?tagFilter=%5Estep_time%2Fbest%24&smoothing=0#timeseries")
    lines = browser.wait_for(BEST_STEP_TIME_LINES)

    assert len(lines) == 1, f"expected one plotted series, found {lines}"
    points = _points(lines[0])
    assert len(points) == len(BEST_STEP_TIMES), lines[0]
    xs, ys = zip(*points)
    assert all(a < b for a, b in zip(xs, xs[1:])), "updates are not drawn left to right"
    # Screen y grows downwards and is an affine map of the value: each drop in step time is drawn to scale.
    scale = [(y - ys[0]) / (value - BEST_STEP_TIMES[0]) for y, value in zip(ys[1:], BEST_STEP_TIMES[1:])]
    assert all(s < 0 for s in scale) and max(scale) - min(scale) < 1e-3 * abs(scale[0]), (ys, BEST_STEP_TIMES)


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
    # TensorBoard opens the first two sections: step time, then the best placement; the agent's internals last.
    assert [g for g in groups if g != "Pinned"][:1] == ["step_time"] and groups[-1] == "update", groups


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
    return cards.length && cards[0].lines.length >= 4 ? cards : null;
"""


def test_custom_scalars_first_chart_draws_best_and_sampled_step_time_and_every_baseline(dashboard, browser):
    from agents.tracking import STEP_TIME_CHART

    url, _ = dashboard
    browser.open(url + "#custom_scalars")
    first, *others = browser.wait_for(CUSTOM_SCALAR_CARDS)

    assert first["title"] == STEP_TIME_CHART and others, [card["title"] for card in (first, *others)]
    matched = {re.search(r"(step_time/\S+)", match).group(1) for match in first["matches"]}
    assert matched == {"step_time/best", "step_time/sampled"} | {f"step_time/baseline/{name}" for name in BASELINES}
    # TensorBoard draws each series smoothed and raw. The raw best line gives the chart's scale; each baseline
    # is a level line at its own step time on that scale.
    lines = [_points(d) for d in first["lines"]]
    scales = [_affine_fit([y for _, y in line], BEST_STEP_TIMES) for line in lines if len(line) == len(BEST_STEP_TIMES)]
    offset, scale = next(fit for fit in scales if fit is not None)
    levels = sorted({line[0][1] for line in lines if len({y for _, y in line}) == 1})
    expected = sorted(offset + scale * seconds for seconds in BASELINES.values())
    assert len(levels) >= len(expected) and all(any(abs(level - y) < 0.5 for level in levels) for y in expected) and \
        all(any(abs(level - y) < 0.5 for y in expected) for level in levels), (levels, expected)


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
