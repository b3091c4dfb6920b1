"""The WSGI application, ready to answer: each server process loads the URL configuration (and
with it every app's API schemas and views) when it imports this module, not on its first request,
which would otherwise wait half a second or more for it, and a configuration that cannot load
stops the process at its start instead of failing every request.

What the process has loaded by then (Django, the apps, their libraries: about 190,000 objects the
cyclic garbage collector tracks) is moved out of the collector's reach (`gc.freeze`): nothing in
it becomes garbage while the process serves, yet every full collection walked all of it again
(150 ms each, one every few dozen ingest batches: 2% of the web server's CPU under ingest).

The process's C allocator is set for request bodies of megabytes (`core.allocator`)."""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

from core.allocator import allocator_tune

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
get_resolver().url_patterns  # noqa: B018 - loads the URL configuration now
gc.freeze()
allocator_tune()
