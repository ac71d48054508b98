"""Settings, from environment variables prefixed ``RIGHTSIZE_`` (or a ``.env`` file).

Defaults are the embedded deployment: a SQLite file under ``~/.rightsize``, the
in-process bus, nothing to start.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RIGHTSIZE_", env_file=".env", extra="ignore")

    home: Path = Field(
        default=Path("~/.rightsize"), description="Where the embedded deployment keeps its files"
    )
    kb_url: str | None = Field(
        default=None,
        description="sqlite:///FILE or mongodb://HOST/; default: SQLite under home, "
        "or MongoDB when mongo_url is set",
    )
    mongo_url: str | None = Field(default=None, description="MongoDB URL (RIGHTSIZE_MONGO_URL)")

    def knowledge_base_url(self) -> str:
        if self.kb_url:
            return self.kb_url
        if self.mongo_url:
            return self.mongo_url
        return str(self.home.expanduser() / "rightsize.db")
