import pytest

from tinytrain.errors import UsageError
from tinytrain.sizes import parse_size


@pytest.mark.parametrize("text,value", [("256k", 262144), ("256K", 262144), ("256KB", 262144), ("262144", 262144),
                                        ("1m", 1048576), ("1MB", 1048576), ("0.5m", 524288), ("300b", 300), ("300B", 300), ("1024", 1024)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "12q", "-5k", "0", "1.5", "32", "1023", "0.5"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)
