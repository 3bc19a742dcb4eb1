"""``wm-signals ui``: a local web app over the library: the namespace, lanes, thread timelines
and dead letters, server-rendered (Starlette, Jinja2), with live updates by server-sent events.

It reads what the library reads (:mod:`signals.streams.status`, :mod:`~signals.streams.history`,
:mod:`~signals.streams.timeline`, :mod:`~signals.streams.deadletters`, :mod:`~signals.streams.verify`)
and writes nothing, except the dead-letter requeue and drop of operator mode. Every string
read from Redis is tenants' data and reaches the page escaped; the Content-Security-Policy
allows the app's own script and style only.
"""

from workers.ui.app import create_app
from workers.ui.options import UiOptions

__all__ = ("UiOptions", "create_app")
