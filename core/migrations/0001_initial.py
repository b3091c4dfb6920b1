# Project, Membership and IngestKey move from ingest to core. No data moves: the tables keep their
# names (ingest_project, ingest_membership, ingest_ingestkey), so on a database that has them this
# only changes Django's state; on a fresh one ingest 0001 has created them already.

import django.contrib.postgres.fields
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import core.models

MOVED = ("project", "membership", "ingestkey")


def content_types_to_core(apps, schema_editor):
    # Keeps admin permissions and any generic relation pointing at the moved models.
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.using(schema_editor.connection.alias).filter(
        app_label="ingest", model__in=MOVED).update(app_label="core")


def content_types_to_ingest(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.using(schema_editor.connection.alias).filter(
        app_label="core", model__in=MOVED).update(app_label="ingest")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("ingest", "0006_ingest_key_scopes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Project",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("tier_warn", models.FloatField(default=0.6)),
                        ("tier_compress", models.FloatField(default=0.7)),
                        ("tier_force", models.FloatField(default=0.85)),
                        ("tier_break", models.FloatField(default=0.95)),
                        ("allow_private_endpoints", models.BooleanField(default=False)),
                    ],
                    options={"db_table": "ingest_project", "ordering": ["name"]},
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("role", models.CharField(
                            choices=[("viewer", "viewer"), ("editor", "editor"), ("admin", "admin")],
                            default="viewer", max_length=10)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("project", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                      related_name="memberships", to="core.project")),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                   related_name="memberships", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "ingest_membership",
                        "constraints": [models.UniqueConstraint(fields=("project", "user"),
                                                                name="uniq_membership")],
                    },
                ),
                migrations.CreateModel(
                    name="IngestKey",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("name", models.CharField(blank=True, default="", max_length=100)),
                        ("scopes", django.contrib.postgres.fields.ArrayField(
                            base_field=models.CharField(max_length=16), default=core.models.ingest_only,
                            size=None)),
                        ("prefix", models.CharField(db_index=True, max_length=12)),
                        ("key_hash", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("project", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                      related_name="keys", to="core.project")),
                    ],
                    options={"db_table": "ingest_ingestkey"},
                ),
            ],
        ),
        migrations.RunPython(content_types_to_core, content_types_to_ingest),
    ]
