"""Script files take their names from the user's workload name, safely."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_base.errors import InvalidInputError
from tools.planning.script_files import file_stem, write_files


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("lammps-melt", "lammps-melt"),
        ("resnet/50", "resnet_50"),
        ("../escape", "escape"),
        ("../../etc/passwd", "etc_passwd"),
        ("..", "job"),
        (".hidden", "hidden"),
        ("a b\tc", "a_b_c"),
        ("/", "job"),
    ],
)
def test_a_name_becomes_one_plain_file_name(name: str, stem: str) -> None:
    assert file_stem(name) == stem


def test_files_never_land_outside_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    paths = write_files(folder, "../../x/y", ["one", "two"], ".sbatch", field="--sbatch")
    assert [p.name for p in paths] == ["x_y-00.sbatch", "x_y-01.sbatch"]
    assert sorted(p.name for p in folder.iterdir()) == ["x_y-00.sbatch", "x_y-01.sbatch"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert paths[1].read_text() == "two"


def test_a_folder_that_is_a_file_is_an_error_naming_the_option(tmp_path: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("")
    with pytest.raises(InvalidInputError) as caught:
        write_files(blocker, "job", ["x"], ".json", field="--tapis")
    assert caught.value.field == "--tapis"
    assert str(blocker) in str(caught.value)
