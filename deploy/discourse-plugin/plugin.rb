# frozen_string_literal: true

# name: citebot
# about: Site settings that steer the citebot worker (an external bot that answers from the forum's history)
# version: 0.1.0
# authors: citebot maintainers
# url: https://github.com/YOUR-ORG/citebot/tree/main/deploy/discourse-plugin
# required_version: 3.0.0

# The plugin only declares site settings (config/settings.yml). The citebot worker reads them through
# the admin API (GET /admin/site_settings.json) and caches them for 60 s, so admins can switch the
# bot's behaviour from the admin UI without restarting anything. No code runs inside Discourse.

enabled_site_setting :citebot_enabled
