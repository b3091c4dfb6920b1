from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="project",
            name="retention_days",
            field=models.PositiveIntegerField(default=30),
        ),
        migrations.AddField(
            model_name="project",
            name="model_windows",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="project",
            name="price_table",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="project",
            name="triage_enabled",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="project",
            name="triage_daily_calls",
            field=models.PositiveIntegerField(default=200),
        ),
    ]
