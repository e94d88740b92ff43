//! A notice as each target format posts it: CloudEvents 1.0 in structured JSON mode, the
//! `data` object alone (`json`), or the chat services' incoming-webhook message. Pure: a
//! notice in, a content type and body bytes out.

use serde_json::{Value, json};

use super::notice::{Notice, NoticeKind};

/// How a target wants its notices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    CloudEvents,
    Slack,
    Teams,
    GoogleChat,
    Json,
}

impl Format {
    pub const ALL: [Format; 5] =
        [Format::CloudEvents, Format::Slack, Format::Teams, Format::GoogleChat, Format::Json];

    /// The word the notify file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::CloudEvents => "cloudevents",
            Format::Slack => "slack",
            Format::Teams => "teams",
            Format::GoogleChat => "googlechat",
            Format::Json => "json",
        }
    }

    pub fn parse(word: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == word)
    }
}

/// The CloudEvents `type` of a notice: `dev.configsum.<kind>`.
pub fn event_type(kind: NoticeKind) -> String {
    format!("dev.configsum.{}", kind.as_str())
}

/// A request body and its `Content-Type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    pub content_type: &'static str,
    pub bytes: Vec<u8>,
}

/// `notice` as `format` posts it.
pub fn body(format: Format, notice: &Notice) -> Body {
    let (content_type, value) = match format {
        Format::CloudEvents => ("application/cloudevents+json", cloud_event(notice)),
        Format::Json => {
            let mut value = data(notice);
            if let Value::Object(fields) = &mut value {
                fields.insert("type".to_owned(), json!(event_type(notice.kind)));
                fields.insert("time".to_owned(), json!(notice.time.to_string()));
            }
            ("application/json", value)
        }
        Format::Slack => ("application/json", json!({ "text": slack_escape(&text(notice)) })),
        Format::Teams | Format::GoogleChat => ("application/json", json!({ "text": text(notice) })),
    };
    // Serialising a Value of strings cannot fail.
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    Body { content_type, bytes }
}

/// The CloudEvents 1.0 envelope, structured mode: the attributes beside `data`.
fn cloud_event(notice: &Notice) -> Value {
    let w = &notice.workload;
    json!({
        "specversion": "1.0",
        "type": event_type(notice.kind),
        "source": format!("/namespaces/{}/{}/{}", w.namespace, w.resource, w.name),
        "id": notice.id,
        "time": notice.time.to_string(),
        "datacontenttype": "application/json",
        "data": data(notice),
    })
}

/// What happened, to whom, because of what: the workload, its sources, the new digest's
/// prefix where there is one, and the reason.
fn data(notice: &Notice) -> Value {
    let w = &notice.workload;
    let mut data = json!({
        "workload": { "kind": w.kind, "namespace": w.namespace, "name": w.name },
        "sources": notice.sources,
        "reason": notice.reason,
    });
    if let (Some(digest), Value::Object(fields)) = (&notice.digest, &mut data) {
        fields.insert("digest".to_owned(), json!(digest));
    }
    data
}

/// One line for a chat: `configsum: Deployment ns/web rolled (digest 0123456789ab): <reason>`.
pub fn text(notice: &Notice) -> String {
    let w = &notice.workload;
    let what = match notice.kind {
        NoticeKind::Rolled => "rolled",
        NoticeKind::WouldRoll => "would roll (dry run)",
        NoticeKind::Held => "held by the flap guard",
        NoticeKind::Released => "released by the flap guard",
        NoticeKind::Halted => "halted a change's waves",
        NoticeKind::Resumed => "resumed after a halt",
        NoticeKind::WaitingWindow => "waiting for its maintenance window",
    };
    let digest = notice.digest.as_ref().map(|d| format!(" (digest {d})")).unwrap_or_default();
    format!("configsum: {} {}/{} {what}{digest}: {}", w.kind, w.namespace, w.name, notice.reason)
}

/// Slack reads `&`, `<` and `>` as markup: its incoming webhooks want them escaped.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::notice::{Named, NoticeWorkload};

    fn notice(kind: NoticeKind) -> Notice {
        let workload = NoticeWorkload {
            kind: "Deployment".into(),
            resource: "deployments".into(),
            namespace: "shop".into(),
            name: "web".into(),
        };
        let mut notice = Notice::new(
            kind,
            workload,
            "configsum rolled the pod template: changed secret/db".into(),
        );
        notice.id = "0123456789abcdef0123456789abcdef".into();
        notice.time = "2025-03-01T12:00:00Z".parse().expect("time");
        notice.sources = vec![Named {
            kind: "Secret".into(),
            namespace: Some("shop".into()),
            name: "db".into(),
        }];
        notice.digest = Some("0123456789ab".into());
        notice
    }

    fn parsed(body: &Body) -> Value {
        serde_json::from_slice(&body.bytes).expect("JSON body")
    }

    #[test]
    fn a_cloud_event_names_the_workload_its_sources_and_the_digest() {
        let sent = body(Format::CloudEvents, &notice(NoticeKind::Rolled));
        assert_eq!(sent.content_type, "application/cloudevents+json");
        assert_eq!(
            parsed(&sent),
            json!({
                "specversion": "1.0",
                "type": "dev.configsum.rolled",
                "source": "/namespaces/shop/deployments/web",
                "id": "0123456789abcdef0123456789abcdef",
                "time": "2025-03-01T12:00:00Z",
                "datacontenttype": "application/json",
                "data": {
                    "workload": { "kind": "Deployment", "namespace": "shop", "name": "web" },
                    "sources": [{ "kind": "Secret", "namespace": "shop", "name": "db" }],
                    "digest": "0123456789ab",
                    "reason": "configsum rolled the pod template: changed secret/db",
                },
            })
        );
    }

    #[test]
    fn a_halt_without_a_digest_and_a_would_roll_have_their_own_types() {
        let mut halted = notice(NoticeKind::Halted);
        halted.digest = None;
        halted.reason = "its rollout failed".into();
        let sent = parsed(&body(Format::CloudEvents, &halted));
        assert_eq!(sent["type"], "dev.configsum.halted");
        assert!(sent["data"].get("digest").is_none(), "{sent}");
        assert_eq!(sent["data"]["reason"], "its rollout failed");
        let sent = parsed(&body(Format::CloudEvents, &notice(NoticeKind::WouldRoll)));
        assert_eq!(sent["type"], "dev.configsum.would-roll");
        let image = Named { kind: "Image".into(), namespace: None, name: "ghcr.io/a/b:1".into() };
        let mut moved = notice(NoticeKind::Rolled);
        moved.sources = vec![image];
        let sent = parsed(&body(Format::Json, &moved));
        assert_eq!(sent["sources"], json!([{ "kind": "Image", "name": "ghcr.io/a/b:1" }]));
    }

    #[test]
    fn json_posts_the_data_with_its_type_and_time() {
        for kind in [NoticeKind::Rolled, NoticeKind::Halted, NoticeKind::WouldRoll] {
            let sent = body(Format::Json, &notice(kind));
            assert_eq!(sent.content_type, "application/json");
            let value = parsed(&sent);
            assert_eq!(value["type"], format!("dev.configsum.{kind}"));
            assert_eq!(value["time"], "2025-03-01T12:00:00Z");
            assert_eq!(value["workload"]["name"], "web");
            assert_eq!(value["digest"], "0123456789ab");
            assert!(value.get("specversion").is_none() && value.get("data").is_none());
        }
    }

    #[test]
    fn chat_services_get_one_line_of_text() {
        let cases = [
            (NoticeKind::Rolled, "rolled"),
            (NoticeKind::Halted, "halted a change's waves"),
            (NoticeKind::WouldRoll, "would roll (dry run)"),
        ];
        for (kind, says) in cases {
            let expected = format!(
                "configsum: Deployment shop/web {says} (digest 0123456789ab): configsum rolled the pod template: changed secret/db"
            );
            for format in [Format::Slack, Format::Teams, Format::GoogleChat] {
                let sent = body(format, &notice(kind));
                assert_eq!(sent.content_type, "application/json");
                assert_eq!(parsed(&sent), json!({ "text": expected }), "{format:?}");
            }
        }
        // Slack's markup characters are escaped for Slack only.
        let mut odd = notice(NoticeKind::Rolled);
        odd.reason = "a <b> & c".into();
        assert!(
            parsed(&body(Format::Slack, &odd))["text"]
                .as_str()
                .is_some_and(|t| t.ends_with("a &lt;b&gt; &amp; c"))
        );
        assert!(
            parsed(&body(Format::Teams, &odd))["text"]
                .as_str()
                .is_some_and(|t| t.ends_with("a <b> & c"))
        );
    }
}
