from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('studio', '0003_apikey_last_used_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='JobRun',
            fields=[
                ('job', models.CharField(max_length=32, primary_key=True, serialize=False)),
                ('last_at', models.DateTimeField()),
            ],
        ),
    ]
