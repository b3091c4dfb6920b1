# The attribution job kind: a kind name longer than the old 10 characters.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("replay", "0004_faithful_requests"),
    ]

    operations = [
        migrations.AlterField(
            model_name="replayjob",
            name="kind",
            field=models.CharField(
                choices=[
                    ("plain", "replay"),
                    ("without", "without a block"),
                    ("move", "move a block"),
                    ("loo", "leave-one-out"),
                    ("batch", "one variant over many turns"),
                    ("custom", "custom variant"),
                    ("attribution", "attribution (random ablations)"),
                ],
                max_length=20,
            ),
        ),
    ]
