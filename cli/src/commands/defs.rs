//! `weft def register|list|get`: workflow definitions (`/api/metadata/workflow`).

use std::io::{Read as _, Write};
use std::path::Path;

use reqwest::Method;
use serde_json::Value;

use crate::args::{kind_of, read_json_file, DefGetArgs, RegisterArgs};
use crate::client::{self, Client};
use crate::error::{Error, Result};
use crate::{exit, output};

/// Registers each definition of the file in order; stops at the first refusal (the
/// ones before it stay registered and were printed).
pub async fn register(client: &Client, args: &RegisterArgs, out: &mut dyn Write) -> Result<u8> {
    let defs = definitions_of(&args.file, load(&args.file)?)?;
    let count = defs.len();
    for (i, def) in defs.iter().enumerate() {
        let label = label(def);
        if let Err(e) = client.register(def, args.overwrite).await {
            let e = overwrite_hint(e);
            return Err(match count {
                1 => Error::Client(e),
                _ => Error::About {
                    context: format!("{label} (definition {} of {count} in {})", i + 1, args.file),
                    source: e,
                },
            });
        }
        writeln!(out, "registered {label}")?;
    }
    Ok(exit::OK)
}

/// Reads the file (`-`: standard input) as JSON.
pub(crate) fn load(file: &str) -> Result<Value> {
    if file != "-" {
        return read_json_file(Path::new(file)).map_err(Error::Input);
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| Error::Input(format!("cannot read standard input: {e}")))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::Input(format!("standard input is not valid JSON: {e}")))
}

/// The definitions a file holds: one object, or an array of objects.
pub fn definitions_of(file: &str, json: Value) -> Result<Vec<Value>> {
    let defs = match json {
        Value::Array(items) => items,
        one @ Value::Object(_) => vec![one],
        other => {
            return Err(Error::Input(format!(
            "{file} holds {}; expected a workflow definition (a JSON object) or an array of them",
            kind_of(&other)
        )))
        }
    };
    if defs.is_empty() {
        return Err(Error::Input(format!(
            "{file} holds an empty array: nothing to register"
        )));
    }
    if let Some((i, bad)) = defs.iter().enumerate().find(|(_, d)| !d.is_object()) {
        return Err(Error::Input(format!(
            "item {} of {file} is {}, not a workflow definition (a JSON object)",
            i + 1,
            kind_of(bad)
        )));
    }
    Ok(defs)
}

/// `greet version 2` (or just the name when the file gives no version).
fn label(def: &Value) -> String {
    let name = def["name"].as_str().unwrap_or("(unnamed definition)");
    match def["version"].as_i64() {
        Some(v) => format!("{name} version {v}"),
        None => name.to_owned(),
    }
}

/// The gateway's 409 says how to overwrite over HTTP; say it the command line's way.
fn overwrite_hint(e: client::Error) -> client::Error {
    match e {
        client::Error::Refused {
            status: 409,
            code,
            message,
            path,
        } => client::Error::Refused {
            status: 409,
            code,
            message: message.replace("pass overwrite=true", "pass --overwrite"),
            path,
        },
        other => other,
    }
}

/// `weft def list`.
pub async fn list(client: &Client, json: bool, out: &mut dyn Write) -> Result<u8> {
    let defs = client
        .get_json(&["api", "metadata", "workflow"], &[])
        .await?;
    if json {
        writeln!(out, "{}", output::pretty(&defs))?;
    } else {
        let defs = defs.as_array().map(Vec::as_slice).unwrap_or(&[]);
        write!(out, "{}", output::definitions_table(defs))?;
    }
    Ok(exit::OK)
}

/// `weft def get`: the definition as JSON (ready to edit and register again).
pub async fn get(client: &Client, args: &DefGetArgs, out: &mut dyn Write) -> Result<u8> {
    let query: Vec<(&str, String)> = args
        .version
        .map(|v| ("version", v.to_string()))
        .into_iter()
        .collect();
    let def = client
        .send_json(
            Method::GET,
            &["api", "metadata", "workflow", &args.name],
            &query,
            None,
        )
        .await?;
    writeln!(out, "{}", output::pretty(&def))?;
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_file_holds_one_definition_or_an_array_of_them() {
        let one = json!({"name": "greet", "version": 1, "tasks": []});
        assert_eq!(
            definitions_of("f.json", one.clone()).unwrap(),
            vec![one.clone()]
        );
        let two = json!([one.clone(), {"name": "other"}]);
        assert_eq!(definitions_of("f.json", two).unwrap().len(), 2);

        let e = definitions_of("f.json", json!("greet")).unwrap_err();
        assert_eq!(e.exit_code(), exit::USAGE);
        assert_eq!(
            e.to_string(),
            "f.json holds a string; expected a workflow definition (a JSON object) or an array of them"
        );
        let e = definitions_of("f.json", json!([one, 3])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "item 2 of f.json is a number, not a workflow definition (a JSON object)"
        );
        assert!(definitions_of("f.json", json!([])).is_err());
    }

    #[test]
    fn a_conflict_tells_the_flag_to_use() {
        let e = overwrite_hint(client::Error::Refused {
            status: 409,
            code: "conflict".into(),
            message: "workflow definition greet version 1 already exists; pass overwrite=true to replace it".into(),
            path: None,
        });
        assert_eq!(
            e.to_string(),
            "workflow definition greet version 1 already exists; pass --overwrite to replace it"
        );
    }

    #[test]
    fn labels_name_the_version_when_given() {
        assert_eq!(
            label(&json!({"name": "greet", "version": 2})),
            "greet version 2"
        );
        assert_eq!(label(&json!({"name": "greet"})), "greet");
    }
}
