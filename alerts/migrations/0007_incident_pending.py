from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('alerts', '0006_incidents'),
    ]

    operations = [
        migrations.AddField(
            model_name='incident',
            name='confirmed_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        # Every incident written before pending ones existed was announced when it opened.
        migrations.RunSQL(
            "UPDATE alerts_incident SET confirmed_at = created_at WHERE confirmed_at IS NULL",
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name='incident',
            name='status',
            field=models.CharField(choices=[('pending', 'pending'), ('open', 'open'), ('acknowledged', 'acknowledged'), ('resolved', 'resolved'), ('muted', 'muted')], default='open', max_length=16),
        ),
        migrations.AlterField(
            model_name='incident',
            name='resolution',
            field=models.CharField(blank=True, choices=[('', '-'), ('auto', 'auto'), ('user', 'user'), ('transient', 'transient')], default='', max_length=12),
        ),
        migrations.AddField(
            model_name='incidentpolicy',
            name='confirm_sessions',
            field=models.IntegerField(default=2),
        ),
        migrations.AddField(
            model_name='incidentpolicy',
            name='confirm_turns',
            field=models.IntegerField(default=3),
        ),
        migrations.AddField(
            model_name='incidentpolicy',
            name='confirm_seconds',
            field=models.IntegerField(default=900),
        ),
    ]
