# Replays send what the agent sent: each run keeps the exact request it sent and the API mode it
# used; baseline samples are reusable by request key; variants equal to the baseline are marked.

import django.db.models.deletion
from django.db import migrations, models

import core.models


class Migration(migrations.Migration):

    dependencies = [
        ("replay", "0003_project_in_core"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelendpoint",
            name="chat_drops_later_system",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="replayvariant",
            name="no_change",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="replayrun",
            name="request_path",
            field=models.CharField(blank=True, default="", max_length=40),
        ),
        migrations.AddField(
            model_name="replayrun",
            name="request_body",
            field=core.models.EscapedJSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="replayrun",
            name="api_mode",
            field=models.CharField(blank=True, default="", max_length=20),
        ),
        migrations.AddField(
            model_name="replayrun",
            name="mode_note",
            field=models.CharField(blank=True, default="", max_length=300),
        ),
        migrations.AddField(
            model_name="replayrun",
            name="request_key",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="replayrun",
            name="reused_from",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reused_by",
                to="replay.replayrun",
            ),
        ),
        migrations.AddIndex(
            model_name="replayrun",
            index=models.Index(
                condition=models.Q(("reused_from__isnull", True), ("status", "done")),
                fields=["request_key"],
                name="replay_run_reuse_idx",
            ),
        ),
    ]
