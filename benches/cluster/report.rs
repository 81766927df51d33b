//! The results: tables in Markdown, the targets next to what was measured, and a plot of the
//! measured ratios against their targets (SVG), written together to one results file.

use std::fmt::Write as _;
use std::path::Path;

/// One table.
pub struct Table {
    pub title: String,
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

/// Whether a measured value must stay below or above its target.
#[derive(Clone, Copy)]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Goal {
    pub fn met(self, value: f64) -> bool {
        match self {
            Self::AtMost(t) => value <= t,
            Self::AtLeast(t) => value >= t,
        }
    }

    fn target(self) -> f64 {
        match self {
            Self::AtMost(t) | Self::AtLeast(t) => t,
        }
    }

    fn describe(self) -> String {
        match self {
            Self::AtMost(t) => format!("≤ {t}"),
            Self::AtLeast(t) => format!("≥ {t}"),
        }
    }
}

/// A measured value and what it should be.
pub struct Target {
    pub name: String,
    pub value: f64,
    pub goal: Goal,
    pub unit: &'static str,
}

#[derive(Default)]
pub struct Report {
    pub tables: Vec<Table>,
    pub targets: Vec<Target>,
}

impl Report {
    pub fn table(&mut self, title: impl Into<String>, header: Vec<&'static str>) -> &mut Table {
        self.tables.push(Table {
            title: title.into(),
            header,
            rows: Vec::new(),
        });
        self.tables.last_mut().expect("just pushed")
    }

    pub fn target(&mut self, name: impl Into<String>, value: f64, goal: Goal, unit: &'static str) {
        self.targets.push(Target {
            name: name.into(),
            value,
            goal,
            unit,
        });
    }

    /// The whole report as Markdown, under a heading naming the date and the machine.
    pub fn markdown(&self, heading: &str, plot: Option<&str>) -> String {
        let mut out = format!("{heading}\n\n");
        if !self.targets.is_empty() {
            let mut targets = Table {
                title: "Targets".into(),
                header: vec!["", "measured", "target", ""],
                rows: Vec::new(),
            };
            for t in &self.targets {
                targets.rows.push(vec![
                    t.name.clone(),
                    format!("{} {}", round(t.value), t.unit),
                    format!("{} {}", t.goal.describe(), t.unit),
                    if t.goal.met(t.value) { "met" } else { "missed" }.into(),
                ]);
            }
            write_table(&mut out, &targets);
            if let Some(plot) = plot {
                let _ = writeln!(out, "![measured against the targets]({plot})\n");
            }
        }
        for table in &self.tables {
            write_table(&mut out, table);
        }
        out
    }

    /// Each target as a bar, its value divided by the target, against a line at 1: a bar
    /// that ends on the right side of the line met its target.
    pub fn svg(&self) -> String {
        const ROW: f64 = 26.0;
        const LABEL: f64 = 420.0;
        const WIDTH: f64 = 360.0;
        let scale_max = self
            .targets
            .iter()
            .map(|t| t.value / t.goal.target())
            .fold(2.0_f64, f64::max)
            .min(6.0);
        let x = |v: f64| LABEL + WIDTH * (v.min(scale_max) / scale_max);
        let height = ROW * (self.targets.len() as f64 + 2.0);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" \
             font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"8\" y=\"18\" font-weight=\"bold\">measured ÷ target \
             (≤ targets: shorter than the line is met; ≥ targets: longer)</text>\n",
            w = LABEL + WIDTH + 120.0
        );
        for (i, t) in self.targets.iter().enumerate() {
            let y = ROW * (i as f64 + 1.0) + 6.0;
            let relative = t.value / t.goal.target();
            let colour = if t.goal.met(t.value) {
                "#3a8d3a"
            } else {
                "#c0392b"
            };
            let _ = writeln!(
                svg,
                "<text x=\"8\" y=\"{ty}\">{name} ({goal})</text>\
                 <rect x=\"{LABEL}\" y=\"{y}\" width=\"{bw:.1}\" height=\"{bh}\" fill=\"{colour}\"/>\
                 <text x=\"{tx:.1}\" y=\"{ty}\">{value} {unit}</text>",
                ty = y + 14.0,
                name = escape(&t.name),
                goal = escape(&t.goal.describe()),
                bw = x(relative) - LABEL,
                bh = ROW - 8.0,
                tx = x(relative) + 4.0,
                value = round(t.value),
                unit = t.unit,
            );
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{l:.1}\" x2=\"{l:.1}\" y1=\"{top}\" y2=\"{bottom}\" stroke=\"black\" \
             stroke-dasharray=\"4 3\"/>\n</svg>",
            l = x(1.0),
            top = ROW,
            bottom = height - ROW + 4.0,
        );
        svg
    }

    /// Writes `name.md` and `name.svg` into `dir`.
    pub fn write(&self, dir: &Path, name: &str, heading: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let plot = format!("{name}.svg");
        std::fs::write(dir.join(&plot), self.svg())?;
        std::fs::write(
            dir.join(format!("{name}.md")),
            self.markdown(heading, Some(&plot)),
        )
    }
}

fn write_table(out: &mut String, table: &Table) {
    let _ = writeln!(out, "### {}\n", table.title);
    let _ = writeln!(out, "| {} |", table.header.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(table.header.len()));
    for row in &table.rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
}

/// `bytes` in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// Three significant digits, without trailing zeros.
pub fn round(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let digits = (2 - value.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{value:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The `q` (0..=1) quantile of `values`, by nearest rank: with few values, 0.99 is the largest.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or(f64::NAN)
}
