"""The Browser's GraSS style (`gpustack.grass`), generated from the catalog's systems by
`python -m gpustack_compiler.neo4j.server.browser.style`: variables coloured by system (`:Sys_<system>`),
captioned by short name, sized by root debt (`:Debt1`, `:Debt10`, `:Debt100`), roots ringed in red,
constants and the other node kinds their own colours.

Browser applies every rule whose labels a node carries, in file order, later ones winning: the system
colours come after `node.Variable`, and the debt sizes after `node.Root`."""

from __future__ import annotations

from pathlib import Path

from gpustack_compiler.base.yaml_lines import load

from ...load import DEBT_STEPS
from .guide import STYLE

SYSTEMS = Path(__file__).resolve().parents[4] / "catalog" / "systems.yaml"

# Kelly's colours of maximum contrast (K. L. Kelly, "Twenty-two colors of maximum contrast", Color
# Engineering 3(6), 1965), less white and black; more systems than colours reuse them in order.
KELLY = ("#F3C300", "#875692", "#F38400", "#A1CAF1", "#BE0032", "#C2B280", "#848482", "#008856", "#E68FAC",
         "#0067A5", "#F99379", "#604E97", "#F6A600", "#B3446C", "#DCD300", "#882D17", "#8DB600", "#654522",
         "#E25822", "#2B3D26")
DEBT_DIAMETERS = {1: 50, 10: 65, 100: 85}  # px, by the loader's DEBT_STEPS

BASE = '''node {
  diameter: 40px;
  color: #A5ABB6;
  border-color: #9AA1AC;
  border-width: 2px;
  text-color-internal: #FFFFFF;
  font-size: 10px;
  caption: "{name}";
}
relationship {
  color: #A5ABB6;
  shaft-width: 1px;
  font-size: 8px;
  padding: 3px;
  text-color-external: #000000;
  text-color-internal: #FFFFFF;
  caption: "<type>";
}
node.Variable {
  color: #4C8EDA;
  border-color: #2870C2;
  diameter: 40px;
  caption: "{short}";
}
'''

TAIL = '''node.Leaf {
  border-color: #2E7D32;
  border-width: 4px;
}
node.Root {
  border-color: #EB2728;
  border-width: 6px;
  diameter: 45px;
}
{debt}node.Constant {
  color: #FFE081;
  border-color: #9F8C4B;
  text-color-internal: #000000;
  diameter: 35px;
  caption: "{symbol}";
}
node.Relation {
  color: #C990C0;
  border-color: #B261A5;
  diameter: 25px;
  caption: "{variant}";
}
node.Constraint {
  color: #DA7194;
  border-color: #CC3C6C;
  diameter: 25px;
}
node.Preset {
  color: #57C7E3;
  border-color: #23B3D7;
  text-color-internal: #2A2C34;
  diameter: 55px;
  caption: "{name}";
}
node.System {
  color: #F79767;
  border-color: #F36924;
  diameter: 80px;
  caption: "{name}";
}
node.Reference {
  color: #D9C8AE;
  border-color: #C0A378;
  text-color-internal: #2A2C34;
  diameter: 30px;
  caption: "{key}";
}
relationship.FEEDS {
  color: #6E7B8B;
  shaft-width: 2px;
}
relationship.DEFINES {
  color: #2870C2;
  shaft-width: 3px;
}
relationship.CONSTRAINS {
  color: #CC3C6C;
  shaft-width: 1px;
}
relationship.ASSIGNS {
  color: #23B3D7;
  shaft-width: 1px;
  caption: "{value}";
}
'''


def _text_colour(hex_colour: str) -> str:
    """Black on light fills, white on dark ones (relative luminance, ITU-R BT.709 weights)."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 140 else "#FFFFFF"


def style_grass(systems: list[str]) -> str:
    colours = "".join(
        f"node.Sys_{name} {{\n  color: {c};\n  border-color: {c};\n  text-color-internal: {_text_colour(c)};\n}}\n"
        for name, c in zip(systems, (KELLY[i % len(KELLY)] for i in range(len(systems)))))
    debt = "".join(f"node.Debt{step} {{\n  diameter: {DEBT_DIAMETERS[step]}px;\n}}\n" for step in sorted(DEBT_STEPS))
    return BASE + colours + TAIL.replace("{debt}", debt)


def catalog_systems(path: Path = SYSTEMS) -> list[str]:
    return [s["name"] for s in load(path.read_text(encoding="utf-8"))[0]["systems"]]


if __name__ == "__main__":
    STYLE.write_text(style_grass(catalog_systems()), encoding="utf-8")
    print(f"wrote {STYLE}")
