//! The chart: images/s (solid) and the ideal linear scaling from the smallest slot count
//! (dashed) against slots on the left axis, scaling efficiency on the right axis. Plain SVG
//! 1.1, every text escaped for XML.

use std::fmt::Write as _;

use super::report::Report;

const W: f64 = 720.0;
const H: f64 = 470.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 640.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 370.0;
const BLUE: &str = "#1f5fa8";
const RED: &str = "#c0392b";

/// Text for an XML text node or attribute.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot carry at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// The smallest 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × 10^k at or above `v` (1 for nothing to show).
pub fn nice_ceiling(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * magnitude >= v * (1.0 - 1e-12) {
            return m * magnitude;
        }
    }
    10.0 * magnitude
}

fn finite(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

/// A number for the chart's labels: no decimals from 100 on.
fn label(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn polyline(out: &mut String, points: &[(f64, f64)], color: &str, extra: &str) {
    let pts: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = writeln!(
        out,
        r#"  <polyline fill="none" stroke="{color}" stroke-width="2"{extra} points="{}"/>"#,
        pts.join(" ")
    );
}

/// The chart of a report, as an SVG document.
pub fn render(r: &Report) -> String {
    let max_slots = r.rows.iter().map(|x| x.slots).max().unwrap_or(1).max(1);
    let base = r
        .rows
        .first()
        .map_or(0.0, |x| finite(x.images_per_sec_per_slot));
    let ideal = |slots: u32| base * f64::from(slots);
    let top_ips = r
        .rows
        .iter()
        .map(|x| finite(x.images_per_sec).max(ideal(x.slots)))
        .fold(0.0, f64::max);
    let y_max = nice_ceiling(top_ips);
    let top_eff = r
        .rows
        .iter()
        .map(|x| finite(x.efficiency) * 100.0)
        .fold(100.0, f64::max);
    // 100%, or 125%, 150%, ...: round ticks a fifth apart.
    let e_max = (top_eff / 25.0).ceil() * 25.0;
    let x = |slots: u32| LEFT + (RIGHT - LEFT) * f64::from(slots) / f64::from(max_slots);
    let y = |ips: f64| BOTTOM - (BOTTOM - TOP) * ips / y_max;
    let ye = |pct: f64| BOTTOM - (BOTTOM - TOP) * pct / e_max;

    let mut out = String::new();
    let _ = writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let title = format!(
        "{} {} on `{}`: images/s and scaling efficiency",
        r.framework, r.model, r.cluster
    );
    let _ = writeln!(out, "  <title>{}</title>", xml_escape(&title));
    let _ = writeln!(
        out,
        r#"  <rect x="0" y="0" width="{W}" height="{H}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"  <text x="{}" y="28" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        xml_escape(&title)
    );
    let _ = writeln!(
        out,
        r##"  <text x="{}" y="46" text-anchor="middle" fill="#555">{}</text>"##,
        W / 2.0,
        xml_escape(&format!(
            "{s}x{s} synthetic images, batch {} per slot, {} step(s) timed after {} warm-up",
            r.batch_size,
            r.steps,
            r.warmup_steps,
            s = r.image_size
        ))
    );
    // Grid and left axis (images/s).
    for i in 0..=5 {
        let v = y_max * f64::from(i) / 5.0;
        let yy = y(v);
        let _ = writeln!(
            out,
            "  <line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{RIGHT}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>"
        );
        let _ = writeln!(
            out,
            r#"  <text x="{:.1}" y="{:.1}" text-anchor="end" fill="{BLUE}">{}</text>"#,
            LEFT - 6.0,
            yy + 4.0,
            label(v)
        );
        let pct = e_max * f64::from(i) / 5.0;
        let _ = writeln!(
            out,
            r#"  <text x="{:.1}" y="{:.1}" fill="{RED}">{}%</text>"#,
            RIGHT + 6.0,
            ye(pct) + 4.0,
            label(pct)
        );
    }
    let _ = writeln!(
        out,
        r#"  <line x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}" stroke="black"/>"#
    );
    let _ = writeln!(
        out,
        r#"  <line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}" stroke="black"/>"#
    );
    let _ = writeln!(
        out,
        r#"  <line x1="{RIGHT}" y1="{TOP}" x2="{RIGHT}" y2="{BOTTOM}" stroke="black"/>"#
    );
    for row in &r.rows {
        let xx = x(row.slots);
        let _ = writeln!(
            out,
            r#"  <line x1="{xx:.1}" y1="{BOTTOM}" x2="{xx:.1}" y2="{:.1}" stroke="black"/>"#,
            BOTTOM + 5.0
        );
        let _ = writeln!(
            out,
            r#"  <text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            BOTTOM + 20.0,
            row.slots
        );
    }
    let _ = writeln!(
        out,
        r#"  <text x="{:.1}" y="{:.1}" text-anchor="middle">slots</text>"#,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 40.0
    );
    let _ = writeln!(
        out,
        r#"  <text x="20" y="{:.1}" text-anchor="middle" fill="{BLUE}" transform="rotate(-90 20 {:.1})">images/s</text>"#,
        (TOP + BOTTOM) / 2.0,
        (TOP + BOTTOM) / 2.0
    );
    let _ = writeln!(
        out,
        r#"  <text x="{:.1}" y="{:.1}" text-anchor="middle" fill="{RED}" transform="rotate(90 {:.1} {:.1})">scaling efficiency</text>"#,
        W - 18.0,
        (TOP + BOTTOM) / 2.0,
        W - 18.0,
        (TOP + BOTTOM) / 2.0
    );
    // The series.
    let ideal_pts: Vec<(f64, f64)> = r
        .rows
        .iter()
        .map(|row| (x(row.slots), y(ideal(row.slots))))
        .collect();
    let ips_pts: Vec<(f64, f64)> = r
        .rows
        .iter()
        .map(|row| (x(row.slots), y(finite(row.images_per_sec))))
        .collect();
    let eff_pts: Vec<(f64, f64)> = r
        .rows
        .iter()
        .map(|row| (x(row.slots), ye(finite(row.efficiency) * 100.0)))
        .collect();
    let _ = writeln!(out, r#"  <g id="ideal">"#);
    polyline(
        &mut out,
        &ideal_pts,
        BLUE,
        r#" stroke-dasharray="6 4" opacity="0.6""#,
    );
    let _ = writeln!(out, "  </g>");
    let _ = writeln!(out, r#"  <g id="images-per-sec">"#);
    polyline(&mut out, &ips_pts, BLUE, "");
    for ((px, py), row) in ips_pts.iter().zip(&r.rows) {
        let _ = writeln!(
            out,
            r#"  <circle cx="{px:.1}" cy="{py:.1}" r="4" fill="{BLUE}"><title>{} slot(s): {:.1} images/s</title></circle>"#,
            row.slots,
            finite(row.images_per_sec)
        );
    }
    let _ = writeln!(out, "  </g>");
    let _ = writeln!(out, r#"  <g id="efficiency">"#);
    polyline(&mut out, &eff_pts, RED, "");
    for ((px, py), row) in eff_pts.iter().zip(&r.rows) {
        let _ = writeln!(
            out,
            r#"  <rect x="{:.1}" y="{:.1}" width="8" height="8" fill="{RED}"><title>{} slot(s): {:.1}% efficiency</title></rect>"#,
            px - 4.0,
            py - 4.0,
            row.slots,
            finite(row.efficiency) * 100.0
        );
    }
    let _ = writeln!(out, "  </g>");
    // Legend, in one row under the axis (never over the lines).
    let ly = H - 18.0;
    let entries = [
        (LEFT, "images/s", BLUE, ""),
        (
            LEFT + 120.0,
            "ideal (linear from the first)",
            BLUE,
            r#" stroke-dasharray="6 4""#,
        ),
        (LEFT + 360.0, "scaling efficiency (right axis)", RED, ""),
    ];
    for (lx, name, color, dash) in entries {
        let _ = writeln!(
            out,
            r#"  <line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{dash}/>"#,
            lx + 24.0
        );
        let _ = writeln!(
            out,
            r#"  <text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 30.0,
            ly + 4.0,
            xml_escape(name)
        );
    }
    let _ = writeln!(out, "</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::row;
    use crate::bench::report::Row;
    use crate::bench::{Framework, Raw, Settings};

    /// A small well-formedness check: one root, every tag closed in order, attributes quoted,
    /// no raw `<` or stray `&` in text.
    fn well_formed(doc: &str) -> Result<Vec<String>, String> {
        let body = doc
            .strip_prefix(r#"<?xml version="1.0" encoding="UTF-8"?>"#)
            .ok_or("no XML declaration")?;
        let mut stack: Vec<String> = Vec::new();
        let mut seen = Vec::new();
        let mut rest = body;
        let mut roots = 0;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            check_text(text)?;
            if stack.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside the root: {text:?}"));
            }
            let close = rest[open..].find('>').ok_or("an unclosed tag")? + open;
            let tag = &rest[open + 1..close];
            if let Some(name) = tag.strip_prefix('/') {
                let top = stack.pop().ok_or(format!("</{name}> closes nothing"))?;
                if top != name.trim() {
                    return Err(format!("</{name}> closes <{top}>"));
                }
            } else {
                let self_closing = tag.ends_with('/');
                let inner = tag.trim_end_matches('/');
                let name = inner.split_whitespace().next().ok_or("an empty tag")?;
                check_attributes(&inner[name.len()..])?;
                if stack.is_empty() {
                    roots += 1;
                }
                seen.push(name.to_string());
                if !self_closing {
                    stack.push(name.to_string());
                }
            }
            rest = &rest[close + 1..];
        }
        check_text(rest)?;
        if !stack.is_empty() || roots != 1 || !rest.trim().is_empty() {
            return Err(format!("unbalanced: open {stack:?}, roots {roots}"));
        }
        Ok(seen)
    }

    fn check_text(text: &str) -> Result<(), String> {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| entity.starts_with(e))
            {
                return Err(format!("a stray & in {text:?}"));
            }
        }
        if text.contains('>') {
            return Err(format!("a raw > in {text:?}"));
        }
        Ok(())
    }

    fn check_attributes(mut attrs: &str) -> Result<(), String> {
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() {
                return Ok(());
            }
            let eq = attrs
                .find("=\"")
                .ok_or(format!("an unquoted attribute: {attrs}"))?;
            let name = &attrs[..eq];
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("a bad attribute name {name:?}"));
            }
            let value_end = attrs[eq + 2..].find('"').ok_or("an unclosed attribute")? + eq + 2;
            check_text(&attrs[eq + 2..value_end])?;
            if attrs[eq + 2..value_end].contains('<') {
                return Err("< in an attribute".into());
            }
            attrs = &attrs[value_end + 1..];
        }
    }

    fn report(rows: Vec<Row>) -> Report {
        let s = Settings::parse(&Raw::default()).unwrap();
        Report::new("bench-t", Framework::Tensorflow, &s, rows)
    }

    #[test]
    fn the_chart_is_well_formed_with_every_series() {
        let doc = render(&report(vec![
            row(1, 1300.0),
            row(4, 5800.0),
            row(12, 15300.0),
        ]));
        let tags = well_formed(&doc).unwrap();
        assert_eq!(tags[0], "svg");
        assert_eq!(tags.iter().filter(|t| *t == "polyline").count(), 3);
        assert_eq!(tags.iter().filter(|t| *t == "circle").count(), 3);
        assert!(doc.contains(r#"<g id="ideal">"#) && doc.contains("stroke-dasharray"));
        // Ideal at 12 slots: 15,600 images/s, so the axis goes to 20,000.
        assert!(doc.contains(">20000</text>"), "{doc}");
        assert!(
            doc.contains(">125%</text>"),
            "efficiency 111.5% at 4 slots: {doc}"
        );
        assert!(doc.contains("<title>12 slot(s): 15300.0 images/s</title>"));
    }

    #[test]
    fn odd_figures_still_make_a_well_formed_chart() {
        for rows in [
            vec![],
            vec![row(1, 0.0)],
            vec![row(1, f64::NAN), row(2, f64::INFINITY)],
            vec![row(3, 0.001)],
        ] {
            let doc = render(&report(rows));
            well_formed(&doc).unwrap();
            assert!(!doc.contains("NaN") && !doc.contains("inf"), "{doc}");
        }
    }

    #[test]
    fn text_is_escaped_for_xml() {
        let mut r = report(vec![row(1, 10.0)]);
        r.cluster = "a<b>&\"c'\u{1}".into();
        let doc = render(&r);
        well_formed(&doc).unwrap();
        assert!(doc.contains("a&lt;b&gt;&amp;&quot;c&apos;?"));
        assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><a><b></a></b>").is_err());
        assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><a>x & y</a>").is_err());
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(15_600.0), 20_000.0);
        assert_eq!(nice_ceiling(2_000.0), 2_000.0);
        assert_eq!(nice_ceiling(2_100.0), 2_500.0);
        assert_eq!(nice_ceiling(2_693.0), 3_000.0);
        assert_eq!(nice_ceiling(7.0), 8.0);
        assert_eq!(nice_ceiling(0.09), 0.1);
    }
}
