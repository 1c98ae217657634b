from django.apps import AppConfig


class ReposConfig(AppConfig):
    name = "repos"
    verbose_name = "Repositories"
