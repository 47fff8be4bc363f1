"""Chat operations: `render` builds Slack Block Kit (pure); `slack` is the Bolt app and transport."""
