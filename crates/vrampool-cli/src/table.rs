//! Plain text tables with aligned columns.

/// A table: a header and rows of cells, printed with columns padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text: left-aligned first column, the others right-aligned.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().map(|r| r[c].chars().count()).chain([self.header[c].len()]).max().unwrap_or(0))
            .collect();
        let line =
            |cells: &[String]| {
                cells
                    .iter()
                    .enumerate()
                    .map(|(c, cell)| {
                        if c == 0 { format!("{cell:<w$}", w = widths[c]) } else { format!("{cell:>w$}", w = widths[c]) }
                    })
                    .collect::<Vec<_>>()
                    .join("  ")
            };
        let mut out = line(&self.header);
        out.push('\n');
        out.push_str(&widths.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().join("  "));
        for row in &self.rows {
            out.push('\n');
            out.push_str(&line(row));
        }
        out
    }
}

/// An optional number, or `-`.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".into(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut t = Table::new(&["name", "value"]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["long name".into(), "12345".into()]);
        assert_eq!(t.render(), "name       value\n---------  -----\na              1\nlong name  12345");
        assert_eq!(or_dash::<u64>(None), "-");
    }
}
