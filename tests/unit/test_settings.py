"""Settings: TLS options, the signing key, and text values that must be UTF-8 (no network)."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from signals.streams.urls import TLSOptions
from workers.runtime.settings import Settings

URL = "rediss://127.0.0.1:6380/0"


def test_no_tls_setting_means_no_tls_options() -> None:
    """Without a tls_* setting, Settings.tls() is None (rediss:// then uses the system's CAs)."""
    assert Settings(redis_url=URL).tls() is None


def test_tls_settings_become_tls_options() -> None:
    """The four tls_* settings map onto TLSOptions."""
    settings = Settings(redis_url=URL, tls_ca_file="ca.pem", tls_cert_file="c.pem", tls_key_file="k.pem",
                        tls_insecure_skip_verify=True)
    assert settings.tls() == TLSOptions("ca.pem", "c.pem", "k.pem", insecure_skip_verify=True)


def test_tls_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """WM_SIGNALS_TLS_* variables are read like every other setting."""
    monkeypatch.setenv("WM_SIGNALS_REDIS_URL", URL)
    monkeypatch.setenv("WM_SIGNALS_TLS_CA_FILE", "/etc/wm/ca.crt")
    monkeypatch.setenv("WM_SIGNALS_TLS_INSECURE_SKIP_VERIFY", "1")
    assert Settings().tls() == TLSOptions(ca_file="/etc/wm/ca.crt", insecure_skip_verify=True)


@pytest.mark.parametrize("url", [None, "redis://127.0.0.1:6379/0"])
def test_tls_settings_need_a_rediss_url(url: str | None) -> None:
    """TLS settings with no URL (the embedded server) or a plain one are refused, not ignored."""
    with pytest.raises(pydantic.ValidationError, match="rediss://"):
        Settings(redis_url=url, tls_ca_file="ca.pem")


def test_no_signing_key_by_default() -> None:
    """Signing is off unless a key is given."""
    assert Settings().signing_key_bytes() is None


def test_the_signing_key_from_a_file(tmp_path: Path) -> None:
    """signing_key_file is read once, surrounding whitespace dropped; the key is never shown in repr."""
    path = tmp_path / "key"
    path.write_text("0123456789abcdef0123456789abcdef\n")
    settings = Settings(signing_key_file=str(path))
    assert settings.signing_key_bytes() == b"0123456789abcdef0123456789abcdef"
    assert "0123456789abcdef" not in repr(settings)


def test_the_signing_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """WM_SIGNALS_SIGNING_KEY holds the key itself."""
    monkeypatch.setenv("WM_SIGNALS_SIGNING_KEY", "k" * 32)
    assert Settings().signing_key_bytes() == b"k" * 32


def test_a_short_signing_key_is_refused() -> None:
    """A key under 16 bytes is refused."""
    with pytest.raises(pydantic.ValidationError, match="at least 16 bytes"):
        Settings(signing_key="short")


def test_a_missing_signing_key_file_is_named(tmp_path: Path) -> None:
    """An unreadable key file is refused, naming it."""
    missing = tmp_path / "nope"
    with pytest.raises(pydantic.ValidationError, match="nope"):
        Settings(signing_key_file=str(missing))


def test_a_signing_key_and_a_key_file_together_are_refused(tmp_path: Path) -> None:
    """One source for the key, not two."""
    path = tmp_path / "key"
    path.write_text("k" * 32)
    with pytest.raises(pydantic.ValidationError, match="not both"):
        Settings(signing_key="k" * 32, signing_key_file=str(path))


def test_a_text_setting_that_is_not_utf8_is_refused() -> None:
    """An environment value carrying undecodable bytes (lone surrogates) is refused, not passed on."""
    with pytest.raises(pydantic.ValidationError, match="not valid UTF-8"):
        Settings(redis_url="redis://127.0.0.1:6379/\udcff")


@pytest.mark.parametrize(("given", "level"), [("WARNING", "warning"), ("warn", "warning"), ("Warn", "warning"),
                                              ("fatal", "critical"), (" debug ", "debug")])
def test_log_levels_the_standard_library_reads_are_taken(given: str, level: str) -> None:
    """Any case, and ``warn``/``fatal``: deployments set them while the level went straight
    to the standard library, which reads both; checking the level must not stop them."""
    assert Settings(log_level=given).log_level == level


def test_a_log_level_that_is_none_is_refused() -> None:
    """A name no logger knows is refused, naming the setting."""
    with pytest.raises(pydantic.ValidationError, match="log_level"):
        Settings(log_level="verbose")


def test_verification_keys_from_the_environment_or_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """WM_SIGNALS_VERIFY_KEYS is a JSON list; verify_keys_file holds one key per line (blank
    lines ignored); the signer signs with the signing key and accepts all of them."""
    monkeypatch.setenv("WM_SIGNALS_SIGNING_KEY", "n" * 32)
    monkeypatch.setenv("WM_SIGNALS_VERIFY_KEYS", '["' + "o" * 32 + '"]')
    signer = Settings().signer()
    assert signer is not None and signer.key == b"n" * 32 and signer.verify_keys == (b"o" * 32,)
    monkeypatch.delenv("WM_SIGNALS_VERIFY_KEYS")
    path = tmp_path / "verify"
    path.write_text("  " + "a" * 32 + "\n\n" + "b" * 32 + "\n")
    signer = Settings(verify_keys_file=str(path)).signer()
    assert signer is not None and signer.verify_keys == (b"a" * 32, b"b" * 32)
    assert "a" * 32 not in repr(Settings(verify_keys_file=str(path)))


def test_verification_keys_need_a_signing_key_and_length() -> None:
    """Verification keys without a signing key, or a short one, are refused, naming the rule."""
    with pytest.raises(pydantic.ValidationError, match="verify_keys need a signing key"):
        Settings(verify_keys=["o" * 32])
    with pytest.raises(pydantic.ValidationError, match="verification key 1 must be at least 16 bytes"):
        Settings(signing_key="n" * 32, verify_keys=["short"])
    assert Settings().signer() is None
