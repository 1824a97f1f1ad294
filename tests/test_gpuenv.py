"""The GPU environment (constraints-gpu.txt, `make gpu-setup`): its pins cover what the GPU path imports, and they resolve together.

The resolution test runs pip's resolver for real against the package registry, as a dry run that reads each wheel's metadata
with HTTP range requests (pip's fast-deps), so no CUDA wheel is downloaded: about 40 s (2 min on a busy machine) and 100 MB of index pages and
wheel-metadata ranges on a cold pip cache. It is skipped, saying so, when the registry cannot be reached.
"""
import json, os, platform, re, shlex, subprocess, sys, time, tomllib
from pathlib import Path
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT/'constraints-gpu.txt'
GPU_PATH = ('torch', 'vllm', 'trl', 'transformers', 'peft', 'accelerate', 'deepspeed')  # what GRPO, SFT and serving import on GPUs
SAME_AS_CPU = ('torch', 'transformers', 'trl', 'peft', 'accelerate')  # as in pyproject's `local` extra: the GPU runs what the CPU suite tests
# pip settings kept from the environment: how to reach a registry, not which extra packages to offer
PIP_KEEP = ('PIP_CERT', 'PIP_CLIENT_CERT', 'PIP_PROXY', 'PIP_DEFAULT_TIMEOUT', 'PIP_RETRIES', 'PIP_INDEX_URL', 'PIP_TRUSTED_HOST')

def pins(text:str)->dict:
    "name -> (operator, version) of each pin in a constraints file's text (comments and blank lines skipped)"
    out = {}
    for line in text.splitlines():
        line = line.split('#', 1)[0].strip()
        if not line: continue
        m = re.fullmatch(r'([A-Za-z0-9_.\-]+)\s*(===|==)\s*([A-Za-z0-9_.+!\-]+)', line)
        assert m, f"constraints-gpu.txt: not an exact pin: {line!r}"
        out[canonicalize_name(m[1])] = (m[2], m[3])
    return out

def gpu_setup_pip_args()->list:
    "The arguments after `pip install` in `make gpu-setup`, as `make -n` prints them (nothing is run)"
    r = subprocess.run(['make', '-n', '-B', '--no-print-directory', 'gpu-setup'], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"make -n gpu-setup failed: {r.stderr}"
    lines = [l for l in r.stdout.splitlines() if ' -m pip install ' in l and '--upgrade pip' not in l]
    assert len(lines) == 1, f"make gpu-setup should run one pip install of the environment, not:\n{r.stdout}"
    argv = shlex.split(lines[0])
    assert argv[0] == '.venv-gpu/bin/python', f"gpu-setup installs into {argv[0]}, not .venv-gpu"
    return [a for a in argv[argv.index('install') + 1:] if a != '-q']

def test_pins_cover_gpu_path():
    "Every package the GPU path imports is pinned to one version; torch and torchvision so that a local CPU build cannot match"
    p = pins(CONSTRAINTS.read_text())
    assert set(GPU_PATH) <= set(p), f"not pinned in constraints-gpu.txt: {sorted(set(GPU_PATH) - set(p))}"
    # '==2.13.0' would also take '2.13.0+cpu' from a find-links folder (as on this project's CPU machines); '===' cannot
    assert p['torch'][0] == '===' and p['torchvision'][0] == '===', p
    assert p['trl'] == ('==', '1.16.0'), p['trl']
    assert Version('0.22.0') <= Version(p['vllm'][1]) <= Version('0.31.0'), f"TRL 1.16.0 supports vLLM 0.22.0 to 0.31.0, not {p['vllm'][1]}"

def test_pins_match_cpu_environment():
    "torch, transformers, TRL, PEFT and accelerate are the versions the CPU .venv tests (pyproject's `local` extra)"
    local = {canonicalize_name(r.name): r for r in map(Requirement, tomllib.loads((ROOT/'pyproject.toml').read_text())['project']['optional-dependencies']['local'])}
    p = pins(CONSTRAINTS.read_text())
    for n in SAME_AS_CPU: assert str(local[n].specifier) == f"=={p[n][1]}", f"{n}: pyproject {local[n].specifier}, constraints-gpu.txt {p[n]}"

def gpu_requirements(args:list)->list:
    "The requirements `make gpu-setup` names: its explicit packages, and those of coda's extras when it installs `-e .[extra]`"
    target = Requirement('coda' + args[args.index('-e') + 1].removeprefix('.'))
    extras = tomllib.loads((ROOT/'pyproject.toml').read_text())['project']['optional-dependencies']
    named = [a for a in args[args.index('-e') + 2:] if not a.startswith('-')]
    return [Requirement(a) for a in named + [r for e in sorted(target.extras) for r in extras[e]]]

def test_make_gpu_setup_uses_constraints():
    "`make gpu-setup` installs coda and every GPU-path package into .venv-gpu under constraints-gpu.txt; `make serve` takes its vllm"
    args = gpu_setup_pip_args()
    assert args[args.index('-c') + 1] == 'constraints-gpu.txt', args
    assert args[args.index('-e') + 1].startswith('.'), f"coda itself belongs in .venv-gpu (training imports it beside vLLM): {args}"
    reqs = {canonicalize_name(r.name): r for r in gpu_requirements(args)}
    assert set(GPU_PATH) <= set(reqs), f"gpu-setup does not install {sorted(set(GPU_PATH) - set(reqs))}"
    assert 'vllm' in reqs['trl'].extras, "trl[vllm]: TRL's own vLLM range joins the resolution"
    serve = re.search(r'^serve:.*?(?=^\S)', (ROOT/'Makefile').read_text(), re.M | re.S)[0]
    assert '$(GPU_BIN)/vllm' in serve and '.venv-vllm/bin/vllm' in serve, f"make serve should use .venv-gpu's vllm, .venv-vllm as fallback:\n{serve}"

def test_gpu_requirements_reads_extras():
    "An explicit list and a pyproject extra are read alike (the `local` extra stands in for a future `gpu` one)"
    assert [r.name for r in gpu_requirements(['-c', 'x.txt', '-e', '.', 'torch', 'trl[vllm]'])] == ['torch', 'trl']
    assert 'trl' in [r.name for r in gpu_requirements(['-c', 'x.txt', '-e', '.[local]'])]

def test_pins_parse_rejects_ranges():
    "A range or unpinned line in the constraints file is refused with the line named"
    with pytest.raises(AssertionError, match='not an exact pin'): pins('vllm>=0.22\n')
    with pytest.raises(AssertionError, match='not an exact pin'): pins('torch\n')
    assert pins('# why\ntorch===2.13.0  # CUDA build\n\ntrl==1.16.0\n') == {'torch': ('===', '2.13.0'), 'trl': ('==', '1.16.0')}

def unmet(report:dict)->list:
    "Requirements in a pip installation report that the report's own versions do not satisfy (markers and extras evaluated)"
    env, items = report['environment'], {canonicalize_name(i['metadata']['name']): i for i in report['install']}
    extras = {n: set(i.get('requested_extras') or ()) for n, i in items.items()}
    def reqs(n):
        for s in items[n]['metadata'].get('requires_dist') or ():
            r = Requirement(s)
            if r.marker is None or any(r.marker.evaluate({**env, 'extra': e}) for e in extras[n] | {''}): yield r
    def widen():
        "Add the extras dependents ask for (vllm -> fastapi[standard]), which bring their own requirements; True if any were new"
        new = [(k, r.extras) for n in items for r in reqs(n) if (k := canonicalize_name(r.name)) in extras and not r.extras <= extras[k]]
        for k, e in new: extras[k] |= e
        return bool(new)
    while widen(): pass
    return [f"{n} needs {r}, has {items.get(canonicalize_name(r.name), {}).get('metadata', {}).get('version')}" for n in items for r in reqs(n)
            if canonicalize_name(r.name) not in items or not r.specifier.contains(items[canonicalize_name(r.name)]['metadata']['version'], prereleases=True)]

def test_unmet_finds_conflicts():
    "unmet reports a version outside a dependent's range, a missing dependency, and honours markers and extras"
    env = dict(python_version='3.11', sys_platform='linux', platform_machine='x86_64', platform_system='Linux')
    def item(name, version, requires=(), extras=None):
        return dict(metadata=dict(name=name, version=version, requires_dist=list(requires)), requested_extras=extras)
    ok = [item('trl', '1.16.0', ['vllm>=0.22.0,<=0.31.0; extra == "vllm"', 'bitsandbytes; extra == "quantization"'], ['vllm']), item('vllm', '0.31.0')]
    assert unmet(dict(environment=env, install=ok)) == []
    assert unmet(dict(environment=env, install=[ok[0], item('vllm', '0.33.0')])) == ['trl needs vllm<=0.31.0,>=0.22.0; extra == "vllm", has 0.33.0']
    assert unmet(dict(environment=env, install=[item('vllm', '0.31.0', ['fastapi[standard]', 'six; python_version > "3.11"']),
                                                item('fastapi', '0.136.3', ['uvicorn; extra == "standard"'])])) == ['fastapi needs uvicorn; extra == "standard", has None']

def _pip_env()->dict:
    "This environment with the machine's own pip configuration left out (local wheel folders, extra indexes, constraints)"
    env = {k: v for k, v in os.environ.items() if not k.startswith('PIP_') or k in PIP_KEEP}
    return {**env, 'PIP_CONFIG_FILE': os.devnull, 'PIP_DISABLE_PIP_VERSION_CHECK': '1'}

@pytest.fixture(scope='module')
def registry():
    "Skip unless the package registry answers (a one-package index query)"
    if not (sys.platform == 'linux' and platform.machine() == 'x86_64'):
        pytest.skip(f"the GPU environment is resolved for Linux x86_64 (this is {sys.platform} {platform.machine()}): wheels' markers differ")
    try: r = subprocess.run([sys.executable, '-m', 'pip', 'index', 'versions', 'trl'], capture_output=True, text=True, timeout=60, env=_pip_env())
    except subprocess.TimeoutExpired: pytest.skip("package registry not reached in 60 s (pip index versions trl): resolution not checked")
    if r.returncode != 0: pytest.skip(f"package registry not reachable (pip index versions trl: {r.stderr.strip()[-300:]}): resolution not checked")

def test_gpu_pins_resolve(registry, tmp_path):
    "pip resolves `make gpu-setup`'s install under constraints-gpu.txt for this Linux x86_64 Python, every pin at its version, no conflict"
    report = tmp_path/'report.json'
    cmd = [sys.executable, '-m', 'pip', 'install', '--dry-run', '--ignore-installed', '--use-feature=fast-deps', '--report', str(report),
           *gpu_setup_pip_args()]
    t0 = time.monotonic()
    try: r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_pip_env())
    except subprocess.TimeoutExpired: pytest.fail("pip's dry-run resolution of the GPU pins did not finish in 300 s (a slow registry, or backtracking)")
    secs = time.monotonic() - t0
    assert r.returncode == 0, f"the GPU pins do not resolve ({secs:.0f} s):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    rep = json.loads(report.read_text())
    got = {canonicalize_name(i['metadata']['name']): i for i in rep['install']}
    for n, (_, v) in pins(CONSTRAINTS.read_text()).items():
        assert n in got and got[n]['metadata']['version'] == v, f"{n}: pinned {v}, resolved {got.get(n, {}).get('metadata', {}).get('version')}"
    assert got['torch']['download_info']['url'].endswith('-manylinux_2_28_x86_64.whl'), got['torch']['download_info']
    assert unmet(rep) == [], unmet(rep)
    # only metadata was read: a download pip logs in full is small (deepspeed's 2 MB source, the build backend), never a CUDA wheel
    big = [m for m in re.findall(r'Downloading (\S+) \(([\d.]+) ([kMG]B)\)', r.stdout) if m[2] == 'GB' or (m[2] == 'MB' and float(m[1]) > 20)]
    assert not big, f"the dry run downloaded whole wheels: {big}"
    print(f"resolved {len(got)} packages in {secs:.0f} s")
