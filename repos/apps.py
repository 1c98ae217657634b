from django.apps import AppConfig
from django.conf import settings


class ReposConfig(AppConfig):
    name = "repos"
    verbose_name = "Repositories"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from .models import Credential
        from .services.credential_cache import credentials_changed

        # Whatever may narrow what a token can do makes every process look tokens up again.
        for model in (Credential, get_user_model()):
            post_save.connect(credentials_changed, sender=model, dispatch_uid=f"credentials_changed:{model.__name__}")
            post_delete.connect(credentials_changed, sender=model, dispatch_uid=f"credentials_deleted:{model.__name__}")
        if settings.AGENTGIT["COUNT_STATEMENTS"]:
            from .services.metrics import count_statements

            count_statements()
