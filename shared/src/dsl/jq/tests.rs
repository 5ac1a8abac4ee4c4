//! The jq sandbox: Conductor's own `JsonJqTransformTest` cases, then the bounds.

use serde_json::{json, Value};

use super::*;

/// The default limits but the clock, which a loaded machine can run out of on a debug
/// build (the first regex compiled, the first date formatted) where the test is not about
/// time.
fn eval(query: &str, input: Value) -> Result<Vec<Value>, JqError> {
    let limits = Limits {
        time: Duration::from_secs(60),
        ..Limits::default()
    };
    evaluate(query, &input, limits)
}

/// Limits that only the bound under test can reach (the clock is generous on debug builds).
fn only(limits: impl FnOnce(&mut Limits)) -> Limits {
    let mut l = Limits {
        time: Duration::from_secs(60),
        steps: u64::MAX,
        outputs: usize::MAX,
    };
    limits(&mut l);
    l
}

#[test]
fn data_is_selected_from_the_whole_input() {
    let input = json!({"queryExpression": ".inputJson.key[0]", "inputJson": {"key": ["VALUE"]}});
    assert_eq!(
        eval(".inputJson.key[0]", input).unwrap(),
        vec![json!("VALUE")]
    );
    // The program sees itself too, as in Conductor.
    assert_eq!(
        eval(
            ".queryExpression",
            json!({"queryExpression": ".queryExpression"})
        )
        .unwrap(),
        vec![json!(".queryExpression")]
    );
}

#[test]
fn maps_strings_lists_and_null_come_out_as_json() {
    let input = json!({"input": {"method": "POST", "successExpression": null}});
    let out = eval(
        "{ method: .input.method // \"GET\", document: .input.document // \"rgt_results\", \
         successExpression: .input.successExpression // \"true\" }",
        input,
    )
    .unwrap();
    assert_eq!(
        out,
        vec![json!({"method": "POST", "document": "rgt_results", "successExpression": "true"})]
    );
    let out = eval(
        "if(.data | length >0) then \"EXISTS\" else \"CREATE\" end",
        json!({"data": []}),
    )
    .unwrap();
    assert_eq!(out, vec![json!("CREATE")]);
    let input = json!({"inputData": {"request": {"transitions": [
        {"name": "redeliver"}, {"name": "redeliver_from_validation_error"}, {"name": "redelivery"}]}}});
    let out = eval(".inputData.request.transitions | map(.name)", input).unwrap();
    assert_eq!(
        out,
        vec![json!([
            "redeliver",
            "redeliver_from_validation_error",
            "redelivery"
        ])]
    );
    assert_eq!(eval("null", json!({})).unwrap(), vec![Value::Null]);
    assert_eq!(eval("empty", json!({})).unwrap(), Vec::<Value>::new());
    assert_eq!(
        eval(".a[], .b", json!({"a": [1, 2], "b": "x"})).unwrap(),
        vec![json!(1), json!(2), json!("x")]
    );
}

#[test]
fn numbers_keep_integers_and_doubles_apart() {
    let out = eval(
        "1, 2.5, (.n * 2), (.f + 1), 100000000000000000000, nan, infinite, -infinite",
        json!({"n": 21, "f": 0.5}),
    )
    .unwrap();
    assert_eq!(
        out,
        vec![
            json!(1),
            json!(2.5),
            json!(42),
            json!(1.5),
            json!(1e20),
            Value::Null,
            json!(f64::MAX),
            json!(-f64::MAX)
        ]
    );
}

#[test]
fn the_standard_library_is_there() {
    let out = eval(
        "[(.s | test(\"a.c\")), (.s | @base64), (0 | todate), (.s | ascii_upcase), \
         ([3, 1, 2] | sort), (.s | split(\"b\"))]",
        json!({"s": "abc"}),
    )
    .unwrap();
    assert_eq!(
        out,
        vec![json!([
            true,
            "YWJj",
            "1970-01-01T00:00:00Z",
            "ABC",
            [1, 2, 3],
            ["a", "c"]
        ])]
    );
}

#[test]
fn a_program_that_does_not_compile_says_where() {
    let e = eval("{", json!({})).unwrap_err();
    assert!(
        matches!(&e, JqError::Compile { message } if message.contains("line 1, column 1")),
        "{e}"
    );
    let e = check(".a | foo(1)").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the jq program does not compile: undefined filter foo/1 at line 1, column 6"
    );
    let e = check("1 +\n  )").unwrap_err();
    assert!(e.to_string().contains("line 2, column 3"), "{e}");
    assert!(matches!(check("$x"), Err(JqError::Compile { .. })));
    check(".persons | map({user: {email, id}})").unwrap();
}

#[test]
fn errors_raised_while_running_carry_jaqs_message() {
    let e = eval("error(\"boom\")", json!({})).unwrap_err();
    assert_eq!(
        e,
        JqError::Runtime {
            message: "boom".into()
        }
    );
    let e = eval("error({a: 1})", json!({})).unwrap_err();
    assert_eq!(e.to_string(), "{\"a\":1} (not a string)");
    let e = eval(".a[]", json!({"a": null})).unwrap_err();
    assert!(e.to_string().contains("null"), "{e}");
    // An error after some values fails the whole program, as in Conductor.
    assert!(eval("1, error(\"late\")", json!({})).is_err());
}

#[test]
fn programs_cannot_read_the_host_or_end_the_process() {
    for q in ["env", "now", "halt", "halt_error", "\"x\" | halt_error(1)"] {
        let e = eval(q, json!({})).unwrap_err();
        assert!(
            matches!(&e, JqError::Runtime { message } if message.contains("not available")),
            "{q}: {e}"
        );
    }
    for q in ["$ENV", "input", "include \"x\"; 1", "import \"x\" as x; 1"] {
        assert!(matches!(check(q), Err(JqError::Compile { .. })), "{q}");
    }
    // Local time is UTC on every host.
    assert_eq!(
        eval(
            "[0 | localtime == gmtime, (0 | strflocaltime(\"%H\"))]",
            json!({})
        )
        .unwrap(),
        vec![json!([true, "00"])]
    );
}

#[test]
fn endless_programs_are_stopped_by_steps_or_by_the_clock() {
    for q in [
        "def f: f; f",
        "[repeat(1)]",
        "until(false; .)",
        "[range(1e12)] | length",
    ] {
        let e = evaluate(q, &json!(null), only(|l| l.steps = 100_000)).unwrap_err();
        assert_eq!(e, JqError::TooManySteps { limit: 100_000 }, "{q}");
    }
    let e = evaluate(
        "last(range(infinite))",
        &json!(null),
        only(|l| l.time = Duration::from_millis(50)),
    )
    .unwrap_err();
    assert_eq!(
        e,
        JqError::Timeout {
            limit: Duration::from_millis(50)
        }
    );
    assert_eq!(
        e.to_string(),
        "the jq program did not finish within its time limit of 50 ms and was stopped"
    );
    // The default bounds stop it too, whichever comes first on this machine.
    assert!(matches!(
        evaluate("def f: f; f", &json!(null), Limits::default()),
        Err(JqError::TooManySteps { .. } | JqError::Timeout { .. })
    ));
}

#[test]
fn deep_recursion_is_stopped_before_the_stack_runs_out() {
    let e = evaluate("def f: 1 + f; f", &json!(null), only(|_| {})).unwrap_err();
    assert_eq!(e, JqError::TooDeep);
    // The sandbox keeps working afterwards.
    assert_eq!(eval(".", json!(1)).unwrap(), vec![json!(1)]);
}

#[test]
fn outputs_nesting_and_program_length_are_capped() {
    let e = evaluate("range(20)", &json!(null), only(|l| l.outputs = 10)).unwrap_err();
    assert_eq!(e, JqError::TooManyOutputs { limit: 10 });
    assert_eq!(
        evaluate("range(10)", &json!(null), only(|l| l.outputs = 10))
            .unwrap()
            .len(),
        10
    );
    let e = eval("reduce range(200) as $i (0; [.])", json!(null)).unwrap_err();
    assert_eq!(e, JqError::TooNested);
    // A deeply nested value is dropped within the sandbox's stack.
    assert_eq!(
        evaluate(
            "reduce range(300000) as $i (0; [.]) | 1",
            &json!(null),
            only(|_| {})
        )
        .unwrap(),
        vec![json!(1)]
    );
    let long = format!("{}1{}", "(".repeat(8191), ")".repeat(8191));
    check(&long).unwrap();
    let e = check(&format!("{long}  ")).unwrap_err();
    assert_eq!(
        e,
        JqError::TooLong {
            len: MAX_QUERY_BYTES + 1
        }
    );
}
