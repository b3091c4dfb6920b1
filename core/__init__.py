"""Policies every app shares and none owns (ORM-free): see core.net for outbound URLs."""
