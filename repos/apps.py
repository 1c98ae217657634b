from django.apps import AppConfig
from django.conf import settings


class ReposConfig(AppConfig):
    name = "repos"
    verbose_name = "Repositories"

    def ready(self) -> None:
        if settings.AGENTGIT["COUNT_STATEMENTS"]:
            from .services.metrics import count_statements

            count_statements()
