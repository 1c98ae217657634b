"""Django admin: where admins manage users and, later, credentials."""

from django.contrib import admin

admin.site.site_header = "AgentGit administration"
admin.site.site_title = "AgentGit admin"
