"""Settings: every key documented in settings.ini and in coda.config, precedence file < env < arguments."""
import configparser
from pathlib import Path
from coda.config import Settings, get_settings, read_ini, settings_doc
from coda.paths import SETTINGS
from dataclasses import fields

def test_ini_keys_are_exactly_the_documented_settings():
    cp = configparser.ConfigParser(inline_comment_prefixes=('#',)); cp.read(SETTINGS)
    names = {f.name for f in fields(Settings)}
    assert set(cp['coda']) == names
    assert all(settings_doc()[k] for k in names)
    text = SETTINGS.read_text().splitlines()  # each key has a comment line (or a shared one) right above it
    for i, line in enumerate(text):
        if '=' in line and not line.startswith('#'):
            assert any(text[j].startswith('#') for j in range(max(0, i - 2), i)), f"undocumented key in settings.ini: {line}"

def test_precedence(tmp_path):
    ini = tmp_path/'s.ini'; ini.write_text('[coda]\nplanner_model = from-file\nscreen_width = 1920\n')
    assert get_settings(ini, env={}).planner_model == 'from-file'
    assert get_settings(ini, env={'CODA_PLANNER_MODEL': 'env'}).planner_model == 'env'
    assert get_settings(ini, env={'CODA_PLANNER_MODEL': 'env'}, planner_model='arg').planner_model == 'arg'
    assert get_settings(ini, env={}).screen == (1920, 800)
    assert get_settings(env={'CODA_SETTINGS': str(ini)}).planner_model == 'from-file'

def test_values_outside_the_allowed_ones_are_refused_with_the_allowed_values(tmp_path):
    "coords = relative and request_timeout = -5 were accepted; now each names the setting, its source and what is allowed"
    import pytest
    ini = tmp_path/'s.ini'; ini.write_text('[coda]\ncoords = relative\n')
    with pytest.raises(ValueError, match=r"coords = 'relative' from .*s\.ini is not allowed; allowed: absolute, relative1000"): get_settings(ini, env={})
    with pytest.raises(ValueError, match=r'request_timeout = -5\.0 from \$CODA_REQUEST_TIMEOUT is not allowed; allowed: a finite number > 0'):
        get_settings(env={'CODA_REQUEST_TIMEOUT': '-5'})
    for bad in (dict(request_timeout=0), dict(request_timeout=float('nan')), dict(screen_width=-1), dict(executor_url='127.0.0.1:8001')):
        with pytest.raises(ValueError, match='is not allowed'): get_settings(env={}, **bad)
    with pytest.raises(ValueError, match='below min_pixels'): Settings(min_pixels=1000, max_pixels=10)
    assert get_settings(env={}, coords='relative1000', request_timeout=0.5).coords == 'relative1000'

def test_a_relative_run_dir_is_the_working_directorys_and_shipped_files_stay_the_checkouts(tmp_path, monkeypatch):
    "run_dir = runs was read from the repository root whatever folder the command ran in; now from the working directory"
    from coda.paths import ROOT, DATA, from_root, from_cwd
    monkeypatch.chdir(tmp_path)
    assert get_settings(env={}).runs == tmp_path/'runs'
    assert get_settings(env={'CODA_RUN_DIR': 'exp/a'}).runs == tmp_path/'exp'/'a'
    assert get_settings(env={}, run_dir=str(tmp_path/'abs')).runs == tmp_path/'abs'
    assert get_settings(env={}, run_dir='~/r').runs == Path.home()/'r'
    assert from_cwd('x') == tmp_path/'x' and from_root('data') == DATA == ROOT/'data' and DATA.is_dir()   # files that ship with coda
    s = get_settings(env={})
    monkeypatch.chdir(ROOT)
    assert s.runs == ROOT/'runs'                          # taken when asked, so the same settings follow the working directory

def test_each_role_has_its_own_api_key_falling_back_to_api_key(tmp_path):
    ini = tmp_path/'s.ini'; ini.write_text('[coda]\napi_key = shared\nplanner_api_key = sk-file\nexecutor_api_key =\n')
    s = get_settings(ini, env={'CODA_JUDGE_API_KEY': 'sk-env'})
    assert [s.api_key_for(r) for r in ('planner', 'executor', 'judge')] == ['sk-file', 'shared', 'sk-env']
    s = get_settings(ini, env={'CODA_PLANNER_API_KEY': 'sk-env'}, planner_api_key='sk-arg', executor_api_key='sk-x')
    assert (s.api_key_for('planner'), s.api_key_for('executor')) == ('sk-arg', 'sk-x')
    assert get_settings(env={}).api_key_for('judge') == 'EMPTY'
    import pytest
    with pytest.raises(ValueError, match='planner, executor, judge'): s.api_key_for('teacher')

def test_config_output_shows_no_api_key():
    from coda.config import show_settings
    out = show_settings(get_settings(env={}, api_key='sk-live-0123456789wxyz', judge_api_key='sk-judge-987654321'))
    assert 'sk-live' not in out and 'sk-judge' not in out and 'api_key = ****wxyz' in out and 'judge_api_key = ****4321' in out
    assert 'planner_api_key =   #' in out          # unset: shown empty, so it is clear that api_key is used
