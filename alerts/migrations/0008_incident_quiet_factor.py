from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('alerts', '0007_incident_pending'),
    ]

    operations = [
        migrations.AddField(
            model_name='incidentpolicy',
            name='quiet_max_factor',
            field=models.IntegerField(default=4),
        ),
    ]
