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
