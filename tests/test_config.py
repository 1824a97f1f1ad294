"""Settings: every key documented in settings.ini and in coda.config, precedence file < env < arguments."""
import configparser
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
