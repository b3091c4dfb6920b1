
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('alerts', '0004_project_in_core'),
    ]

    operations = [
        migrations.AlterField(
            model_name='alert',
            name='rule_kind',
            field=models.CharField(choices=[('tier_crossing', 'Tier crossing'), ('watermark_spike', 'Watermark spike'), ('block_share', 'One huge block'), ('compression_storm', 'Compression storm'), ('validation_failure_rate', 'Validation failure rate'), ('recall_miss_rate', 'Recall misses'), ('count_drift', 'Count drift'), ('lint_finding', 'Lint finding')], max_length=32),
        ),
        migrations.AlterField(
            model_name='alertrule',
            name='kind',
            field=models.CharField(choices=[('tier_crossing', 'Tier crossing'), ('watermark_spike', 'Watermark spike'), ('block_share', 'One huge block'), ('compression_storm', 'Compression storm'), ('validation_failure_rate', 'Validation failure rate'), ('recall_miss_rate', 'Recall misses'), ('count_drift', 'Count drift'), ('lint_finding', 'Lint finding')], max_length=32),
        ),
    ]
