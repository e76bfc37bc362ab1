"""The chat HTTP app (ASGI), the chat service behind it, and the local kit.

The names are imported on first use, so that the deployed chat function, which imports
``server.app`` and ``server.service``, does not load the local kit (SQLite, the file log, the
in-process orchestrator) with them.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .app import ChatApp
    from .local import LocalKit, build_local_kit
    from .service import ChatService, ServiceConfig

__getattr__ = lazy_exports(
    __name__,
    {
        "ChatApp": ".app",
        "ChatService": ".service",
        "LocalKit": ".local",
        "ServiceConfig": ".service",
        "build_local_kit": ".local",
    },
)

__all__ = ["ChatApp", "ChatService", "LocalKit", "ServiceConfig", "build_local_kit"]
