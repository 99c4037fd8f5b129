//! What a push carries, independent of the channel.

use serde::Serialize;

/// How loudly a push arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Silent / passive: a stage boundary the owner may glance at.
    Milestone,
    /// Audible / time-sensitive: something needs attention (or just finished).
    Alert,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Milestone => "milestone",
            Level::Alert => "alert",
        }
    }
}

/// One push. Milestones carry their whole text in `body` (the seed's push body)
/// and an empty `title`; alerts have both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notification {
    pub level: Level,
    /// What happened, e.g. `crashed` or `checkpoint_saved`; alerts coalesce by kind.
    pub kind: String,
    pub title: String,
    pub body: String,
}

impl Notification {
    pub fn milestone(kind: &str, text: impl Into<String>) -> Notification {
        Notification {
            level: Level::Milestone,
            kind: kind.into(),
            title: String::new(),
            body: text.into(),
        }
    }

    pub fn alert(kind: &str, title: impl Into<String>, body: impl Into<String>) -> Notification {
        Notification {
            level: Level::Alert,
            kind: kind.into(),
            title: title.into(),
            body: body.into(),
        }
    }

    /// Title and body as one text, for channels with a single text field.
    pub fn text(&self) -> String {
        match (self.title.is_empty(), self.body.is_empty()) {
            (true, _) => self.body.clone(),
            (false, true) => self.title.clone(),
            (false, false) => format!("{}\n{}", self.title, self.body),
        }
    }

    /// The headline: the title, or the body's first line when there is no title.
    pub fn headline(&self) -> &str {
        if self.title.is_empty() {
            self.body.lines().next().unwrap_or("")
        } else {
            &self.title
        }
    }
}
