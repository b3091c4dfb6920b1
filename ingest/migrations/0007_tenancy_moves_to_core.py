# Project, Membership and IngestKey now belong to core (core 0001, same tables): ingest's foreign
# keys point at core.Project and the three models leave ingest's state. Nothing changes in the
# database. alerts and replay re-point theirs before this runs (their run_before).

import django.db.models.deletion
from django.db import migrations, models


def _project_fk(**kwargs):
    return models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to="core.project", **kwargs)


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0001_initial"),
        ("ingest", "0006_ingest_key_scopes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name="agentsession", name="project",
                                      field=_project_fk(db_index=False)),
                *[
                    migrations.AlterField(model_name=model, name="project",
                                          field=_project_fk(db_constraint=False, db_index=False))
                    for model in ("snapshot", "blockcontent", "messagecontent", "compressionevent",
                                  "recallitem", "validationoutcome")
                ],
                migrations.DeleteModel(name="IngestKey"),
                migrations.DeleteModel(name="Membership"),
                migrations.DeleteModel(name="Project"),
            ],
        ),
    ]
