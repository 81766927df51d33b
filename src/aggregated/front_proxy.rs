//! Who a request comes from: the user the aggregation layer's front proxy (the apiserver)
//! vouches for. The apiserver publishes how it vouches in the ConfigMap
//! `kube-system/extension-apiserver-authentication`: the CA of its client certificate, the
//! names that certificate may carry, and the headers that name the user, their groups and
//! their extra attributes (`--requestheader-*`). A request is the user's only when its
//! connection presented a certificate of that CA with an allowed name; headers alone prove
//! nothing.

use std::collections::BTreeMap;

use http::HeaderMap;

use super::status::Refusal;

/// The ConfigMap the apiserver publishes its front proxy's settings in.
pub const CONFIG_MAP_NAMESPACE: &str = "kube-system";
pub const CONFIG_MAP_NAME: &str = "extension-apiserver-authentication";

/// How the front proxy vouches for users (the `requestheader-*` keys of the ConfigMap).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHeader {
    /// The CA certificates (PEM) of the front proxy's client certificate.
    pub client_ca: String,
    /// The common names its certificate may carry; any, when empty.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefixes: Vec<String>,
}

/// A user, as the apiserver authenticated them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl RequestHeader {
    /// The settings in the ConfigMap's `data`; `None` when it has no front-proxy CA (an
    /// apiserver started without `--requestheader-client-ca-file`: no aggregation layer).
    pub fn from_data(data: &BTreeMap<String, String>) -> Option<Self> {
        let client_ca = data
            .get("requestheader-client-ca-file")
            .filter(|ca| !ca.trim().is_empty())?
            .clone();
        // Each list is a JSON array of strings.
        let list = |key: &str| -> Vec<String> {
            data.get(key)
                .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
                .unwrap_or_default()
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect()
        };
        Some(Self {
            client_ca,
            allowed_names: list("requestheader-allowed-names"),
            username_headers: list("requestheader-username-headers"),
            group_headers: list("requestheader-group-headers"),
            extra_headers_prefixes: list("requestheader-extra-headers-prefix"),
        })
    }

    /// Whether a client certificate of the front proxy's CA named `common_name` is the front
    /// proxy's.
    pub fn allows(&self, common_name: &str) -> bool {
        self.allowed_names.is_empty() || self.allowed_names.iter().any(|n| n == common_name)
    }

    /// The user the front proxy names in `headers`, when the connection's certificate (of the
    /// front proxy's CA) is named `common_name`.
    pub fn user(&self, common_name: Option<&str>, headers: &HeaderMap) -> Result<User, Refusal> {
        let Some(common_name) = common_name else {
            return Err(Refusal::unauthorized(
                "no client certificate of the aggregation layer's front proxy: \
                 syncgc.io is served only through the Kubernetes apiserver",
            ));
        };
        if !self.allows(common_name) {
            return Err(Refusal::unauthorized(format!(
                "the client certificate {common_name:?} is not among the front proxy's \
                 allowed names {:?}",
                self.allowed_names
            )));
        }
        let values = |name: &str| {
            headers
                .get_all(name)
                .into_iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let name = self
            .username_headers
            .iter()
            .flat_map(|h| values(h))
            .find(|v| !v.is_empty())
            .ok_or_else(|| Refusal::unauthorized("the front proxy named no user"))?;
        let groups = self.group_headers.iter().flat_map(|h| values(h)).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            let Some(key) = self.extra_headers_prefixes.iter().find_map(|prefix| {
                let prefix = prefix.to_ascii_lowercase();
                header.strip_prefix(prefix.as_str())
            }) else {
                continue;
            };
            if let Ok(value) = value.to_str() {
                extra
                    .entry(unescape(key))
                    .or_default()
                    .push(value.to_owned());
            }
        }
        Ok(User {
            name,
            groups,
            extra,
        })
    }
}

/// An extra's key as the front proxy escapes it in a header name (percent-encoded, as
/// `k8s.io/apiserver` does), lower case.
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = key
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RequestHeader {
        let data = BTreeMap::from([
            ("requestheader-client-ca-file".to_owned(), "PEM".to_owned()),
            (
                "requestheader-allowed-names".to_owned(),
                r#"["front-proxy-client"]"#.to_owned(),
            ),
            (
                "requestheader-username-headers".to_owned(),
                r#"["X-Remote-User"]"#.to_owned(),
            ),
            (
                "requestheader-group-headers".to_owned(),
                r#"["X-Remote-Group"]"#.to_owned(),
            ),
            (
                "requestheader-extra-headers-prefix".to_owned(),
                r#"["X-Remote-Extra-"]"#.to_owned(),
            ),
        ]);
        RequestHeader::from_data(&data).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        headers
    }

    #[test]
    fn the_front_proxy_names_the_user_their_groups_and_extras() {
        let user = settings()
            .user(
                Some("front-proxy-client"),
                &headers(&[
                    ("X-Remote-User", "alice"),
                    ("X-Remote-Group", "dev"),
                    ("X-Remote-Group", "system:authenticated"),
                    ("X-Remote-Extra-Scopes", "a"),
                    ("X-Remote-Extra-Example.com%2fteam", "blue"),
                ]),
            )
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        assert_eq!(user.extra["scopes"], ["a"]);
        assert_eq!(user.extra["example.com/team"], ["blue"]);
    }

    #[test]
    fn headers_without_the_front_proxy_s_certificate_prove_nothing() {
        let forged = headers(&[("X-Remote-User", "system:admin")]);
        let refused = settings().user(None, &forged).unwrap_err();
        assert_eq!(refused.code, http::StatusCode::UNAUTHORIZED);
        let refused = settings().user(Some("someone-else"), &forged).unwrap_err();
        assert_eq!(refused.code, http::StatusCode::UNAUTHORIZED);
        let refused = settings()
            .user(Some("front-proxy-client"), &headers(&[]))
            .unwrap_err();
        assert_eq!(refused.code, http::StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn no_front_proxy_ca_means_no_aggregation_layer() {
        assert_eq!(RequestHeader::from_data(&BTreeMap::new()), None);
        let no_names = RequestHeader {
            allowed_names: Vec::new(),
            ..settings()
        };
        assert!(no_names.allows("anyone"));
    }
}
