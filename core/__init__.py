"""Tenancy (projects, members and roles, ingest keys and their scopes, access checks, the page
layout context) and the policies every app shares and none owns (core.net for outbound URLs,
core.pgtext for text PostgreSQL refuses). Every other app may import core; core imports none of them."""
