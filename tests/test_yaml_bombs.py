"""Every YAML dkilab reads is read by `config.parse_yaml` (issue 85 item 9): a 1 KB alias bomb ("billion laughs")
in a scripted model or judge, a keys file, a skill's front matter or a published judge's prompts file is refused at
once, naming the file, where a scripted file used to take a minute and 3 GB, then abort."""
import pytest
from dkilab.config import ConfigError

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, n in zip("abcdefgh", "bcdefghi"))  # 10**9 values once expanded


def _scripted(path):
    from dkilab.models.backends.scripted import ScriptedModel

    ScriptedModel(path)


def _keys(path):
    from dkilab.service.keys import read_keys

    read_keys(path)


def _skill(path):
    from dkilab.agents.recall_agent.skill import load_skill

    path.write_text("---\n" + path.read_text() + "---\nbody\n")
    load_skill(path)


def _evermemos(path):
    from dkilab.eval.scoring.evermemos_judge import load_prompts

    load_prompts(path)


@pytest.mark.parametrize("read", [_scripted, _keys, _skill, _evermemos], ids=["scripted", "keys", "skill", "prompts"])
def test_an_alias_bomb_is_refused_naming_the_file(tmp_path, read):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB) < 1024
    with pytest.raises(ConfigError, match=r"bomb.yaml.*over 200,000 values once its aliases \(\*name\) are expanded"):
        read(path)


def test_a_scripted_file_with_a_repeated_key_is_refused_too(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text('default: "a"\ndefault: "b"\n')
    with pytest.raises(ConfigError, match="twice.yaml"):
        _scripted(path)
