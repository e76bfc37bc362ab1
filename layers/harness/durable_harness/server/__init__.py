"""The chat HTTP app (ASGI), the chat service behind it, and the local kit."""

from .app import ChatApp
from .local import LocalKit, build_local_kit
from .service import ChatService, ServiceConfig

__all__ = ["ChatApp", "ChatService", "LocalKit", "ServiceConfig", "build_local_kit"]
